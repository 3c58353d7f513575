"""The skills that runs saved with mcp_tools.save_skill, for the code the
bridge runs:

    from skills import top_customers      # the skill's function
    import mcp_tools; mcp_tools.skills()  # what there is

`from skills import NAME` gives the function NAME that the skill's module
defines, or the module itself when it defines none. The bridge sends each
skill when it is first imported; the folder that holds them is not in the
sandbox. docs/sandbox-api.md in the bridge's repository is the reference.
"""

from mcp_tools import _skills


def __getattr__(name):
    return _skills.attribute(name)


def __dir__():
    return sorted(set(globals()) | set(_skills.names()))
