"""The tools of the MCP servers connected to the bridge, for the code it runs.

    import mcp_tools
    mcp_tools.help()                       # the sandbox's one-screen manual
    mcp_tools.search("read a file")        # find tools
    mcp_tools.call("filesystem", "read_text_file", path="/data/notes.txt")
    from mcp_tools.filesystem import read_text_file   # a tool as a function
    mcp_tools.show(fig)                    # a figure, image or table, shown

servers(), tools(server), describe(server, tool) and search(query) tell what
there is (search finds saved skills too); call() and acall() call a tool and
decode its result; call_raw() and acall_raw() return the raw MCP result.
Errors are MCPToolsError and its subclasses. show(x) saves a figure or image
into the outputs folder ($BRIDGE_OUTPUTS, /tmp/outputs), whose files come
back with the result, and prints a table as Markdown. save_skill(name, fn)
keeps a function for later runs, which import it with `from skills import
name`; skills() lists them. resources() lists the servers' resources and
read_resource(uri) reads one. The reference is docs/sandbox-api.md in the
bridge's repository.
"""

from ._core import (
    LimitExceededError,
    MCPToolsError,
    ToolDeniedError,
    ToolError,
    ToolsUnavailableError,
    ToolTimeoutError,
    UnknownResourceError,
    UnknownServerError,
    UnknownToolError,
    UpstreamError,
    acall,
    acall_raw,
    call,
    call_raw,
    describe,
    search,
    servers,
    tools,
)
from ._help import help
from ._resources import read_resource, resources
from ._show import show
from ._skills import SkillError, save_skill, skills

__all__ = list(_core.PUBLIC)

_core.install_finder()


def __getattr__(name):
    # mcp_tools.<module> works without importing it first.
    return _core.package_attribute(name)
