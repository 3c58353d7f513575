"""mcp_tools.help(): the sandbox's one-screen manual."""

import os

from . import _core

_HELP = """\
bridge sandbox: you are Python {python} in a fresh container, uid {uid}.

- No network: sockets cannot reach anything.
- The filesystem is read-only except /tmp ({tmp}), which is noexec and
  vanishes when the run ends. Nothing is kept between calls.
- Limits: memory {memory}, processes {pids}, CPU {cpu}; the call's timeout
  kills the container, keeping the output printed until then.
- What you print is what the agent gets back (stdout, then stderr); output
  beyond the cap is cut and counted. Print only what is needed.
- Files you save in /tmp/outputs ($BRIDGE_OUTPUTS) come back too, images as
  images, within the operator's limits. mcp_tools.show(x) saves a matplotlib
  figure or PIL image there as PNG, prints a DataFrame as a Markdown table.
- Top-level `await` works: `await asyncio.gather(...)` runs things side by side.
- Python's standard library is here; pip and the network are not.

MCP tools, through `import mcp_tools` (help(mcp_tools.call) and so on for more):
  mcp_tools.search("what to do", limit=5)  find tools: server, tool, params
  mcp_tools.servers()                     connected servers: name, module
  mcp_tools.tools(server)                 a server's tools: name, summary
  mcp_tools.describe(server, tool)        a tool in full, with its result shape
  mcp_tools.call(server, tool, {{"arg": 1}}) or call(server, tool, arg=1)
                                          calls the tool, returns the result
  await mcp_tools.acall(...)              the same, awaitable: asyncio.gather
  mcp_tools.call_raw / acall_raw          the raw MCP CallToolResult dict
  from mcp_tools.<module> import <tool>   one function per tool; help() it
  mcp_tools.save_skill("name", fn, "what it does")  keep fn for later runs
  from skills import name                 a saved skill; mcp_tools.skills() lists them
A result is its structuredContent if any, else its content (JSON text parsed;
one item alone, several in a list). A tool that fails raises ToolError; all
errors are mcp_tools.MCPToolsError (UnknownToolError, ToolTimeoutError...).
"""

_MAX_SERVER_LINES = 8  # keeps the manual on one screen


def _read(*paths):
    for p in paths:
        try:
            with open(p) as f:
                return f.read().strip()
        except OSError:
            pass
    return None


def _memory():
    v = _read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    try:
        if not v or v == "max" or int(v) >= 1 << 60:
            return "not limited"
        return f"{int(v) >> 20} MiB"
    except ValueError:
        return "unknown"


def _cpu():
    v = _read("/sys/fs/cgroup/cpu.max")
    if v is None:
        q = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        p = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        v = f"{q} {p}" if q and p else None
    try:
        q, p = (int(x) for x in v.split())
        if q > 0 and p > 0:  # cgroup v1 says -1 for no quota, v2 says max
            return f"{q / p:g} cores"
    except (AttributeError, ValueError):
        pass
    return "not limited"


def _tmp():
    try:
        st = os.statvfs("/tmp")
        return f"{st.f_blocks * st.f_frsize >> 20} MiB"
    except OSError:
        return "size unknown"


def _servers_text():
    """The paragraph about the connected servers."""
    try:
        _core.relay()
    except _core.ToolsUnavailableError as e:  # not the bridge's sandbox
        return f"MCP tools are unavailable: {e.message}."
    try:
        servers = _core.server_list()
    except _core.ToolsUnavailableError:
        return "No MCP servers are connected to this bridge."
    except _core.MCPToolsError as e:
        return f"The MCP servers could not be listed: {e.type}: {_core.summary(e.message, 200)}"
    if not servers:
        return "No MCP servers are connected to this bridge."
    names = [s["name"] if s["module"] == s["name"] else f"{s['name']} (module {s['module']})" for s in servers]
    return f"Connected MCP servers: {', '.join(names)}."


def _servers_lines():
    import textwrap

    lines = textwrap.wrap(_servers_text(), 79, break_on_hyphens=False, break_long_words=False)
    if len(lines) > _MAX_SERVER_LINES:
        lines = lines[: _MAX_SERVER_LINES - 1] + ["... and more: mcp_tools.servers() lists them all."]
    return lines


def help(obj=None):  # noqa: A001 - the name the tool's description promises
    """Print the sandbox's one-screen manual; help(obj) is Python's help on obj
    (so `from mcp_tools import *` leaves help(fn) working)."""
    import sys

    if obj is not None:
        import builtins

        return builtins.help(obj)

    text = _HELP.format(
        python=sys.version.split()[0],
        uid=os.getuid(),
        tmp=_tmp(),
        memory=_memory(),
        pids=_read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max") or "not limited",
        cpu=_cpu(),
    )
    print(text + "\n" + "\n".join(_servers_lines()))


help.__module__ = "mcp_tools"
