"""mcp_tools.help(): the sandbox's one-screen manual."""

import os

from . import _core

# The manual, a paragraph per subject; {fields} are filled in by help().
_HEAD = "bridge sandbox: you are Python {python} in {where}, uid {uid}; image {variant}."

_FRESH = """\
- No network. Read-only but /tmp ({tmp}, noexec, gone when the run ends;
  inputs in /tmp/inputs, read-only). Nothing is kept between calls.
- Limits: memory {memory}, processes {pids}, CPU {cpu}; the call's timeout
  kills the container, keeping the output printed until then."""

_SESSION = """\
- No network: sockets cannot reach anything.
- A session: earlier calls' variables, imports and /tmp files are here ({tmp},
  noexec; all else read-only); inputs in /tmp/inputs (read-only); sent files
  of /tmp/outputs come back only if changed. {snapshot}
- Limits: memory {memory}, processes {pids}, CPU {cpu}. The call's timeout (or
  cancellation) raises KeyboardInterrupt: code that stops within 3 s keeps the
  session and its state; code that goes on is killed with its container and
  the state is lost, as when memory runs out."""

# What a snapshot keeps: where the engine can checkpoint the sandbox
# (gVisor, which alone gives the runner a token file to come back with),
# the whole session; elsewhere its files.
_SNAPSHOT_FILES = """A snapshot keeps /tmp files only:
  a session restored from one has them, not the variables."""
_SNAPSHOT_MEMORY = """A snapshot keeps it all (gVisor):
  variables, imports, threads and /tmp; not a tool call under way."""

_BACK = """\
- Comes back: stdout, then stderr (cut and counted beyond the cap: print only
  what is needed); files left in /tmp/outputs ($BRIDGE_OUTPUTS), images as images.
- As in Jupyter, the last line's expression is shown (repr; a DataFrame as a
  Markdown table; a figure as an image; not None, nor after a trailing ;), as
  is display(x, ...); plt.show() and figures left open come back as images.
- Top-level `await` works: `await asyncio.gather(...)` runs things side by side."""

# _BACK for a file run by `bridge run`, as python3 would run it.
_SCRIPT_BACK = """\
- Comes back: stdout and stderr, as printed (cut and counted beyond the cap);
  files left in /tmp/outputs are kept only if bridge run was given --outputs.
- A script, as python3 runs it: the last line's value is not shown, nor are
  figures left open; display(x, ...) prints, plt.show() saves the figures.
- Top-level `await` works: `await asyncio.gather(...)` runs things side by side."""

_TOOLS = """\
MCP tools, through `import mcp_tools` (help(mcp_tools.call) and so on for more):
  mcp_tools.search("what to do", limit=5)  find tools: server, tool, params
  mcp_tools.servers()                     connected servers: name, module
  mcp_tools.tools(server)                 a server's tools: name, summary
  mcp_tools.describe(server, tool)        a tool in full, with its result shape
  mcp_tools.call(server, tool, {"arg": 1}) or call(server, tool, arg=1)
                                          calls the tool, returns the result
  await mcp_tools.acall(...)              the same, awaitable; call_raw, acall_raw
                                          return the raw MCP CallToolResult dict
  from mcp_tools.<module> import <tool>   one function per tool; help() it
  mcp_tools.save_skill("name", fn, "what it does")  keep fn for later runs
  from skills import name                 a saved skill; mcp_tools.skills() lists them
  mcp_tools.show(x)                       saves a figure or image, prints a table
  mcp_tools.read_resource(uri)            a server's resource, str or bytes; resources() lists
A result is its structuredContent, else its content (JSON text parsed; one item
alone, several in a list). Errors: mcp_tools.MCPToolsError (ToolError...)."""

# The packages worth naming, as imported; find_spec looks, imports nothing.
_PACKAGES = ("numpy", "pandas", "matplotlib", "scipy", "sklearn", "PIL", "openpyxl", "tabulate", "jinja2")
_MOUNTINFO = "/proc/self/mountinfo"
_DATA_ROOT = "/data"  # where the operator's mounts are
_MAX_MOUNTS = 5  # lines of mounts, then a count of the others
_MAX_ENTRIES = 4  # names of a mount's entries shown
_MAX_SCAN = 10000  # entries of a mount looked at


def _relay_flag(name):
    """A flag the runner published for this run (session, script)."""
    try:
        import _bridge_relay
    except ImportError:
        return False
    return bool(getattr(_bridge_relay, name, False))


def _in_session():
    return _relay_flag("session")


def _packages_lines():
    import importlib.util

    found = []
    for name in _PACKAGES:
        try:
            if importlib.util.find_spec(name) is not None:
                found.append(name)
        except (ImportError, ValueError):
            pass
    missing = [p for p in _PACKAGES if p not in found]
    if not found:
        line = f"- Packages: Python's standard library only (no {', '.join(missing[:4])}...); no pip."
    else:
        line = f"- Packages: {', '.join(found)} and the standard library; no pip."
        if missing:
            line += f" Not here: {', '.join(missing)}."
    import textwrap

    return textwrap.wrap(line, 79, subsequent_indent="  ", break_on_hyphens=False)


def _unescape(field):
    """A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes."""
    if "\\" not in field:
        return field
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts():
    """The mounts under _DATA_ROOT: (path, read_only), by path."""
    try:
        with open(_MOUNTINFO) as f:
            text = f.read()
    except OSError:
        return []
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        point = _unescape(fields[4])
        if point.startswith(_DATA_ROOT + "/"):
            found[point] = "ro" in fields[5].split(",")  # the last mount at a path wins
    return sorted(found.items())


def _entries(path):
    names = []
    more = False
    try:
        with os.scandir(path) as it:
            for entry in it:
                if len(names) == _MAX_SCAN:
                    more = True
                    break
                names.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    except OSError as e:
        return f"cannot be listed ({e.strerror})"
    names.sort()
    count = f"more than {_MAX_SCAN}" if more else str(len(names))
    if not names:
        return "empty"
    shown = ", ".join(names[:_MAX_ENTRIES]) + (", ..." if len(names) > _MAX_ENTRIES else "")
    return f"{count} {'entry' if count == '1' else 'entries'}: {shown}"


def _mounts_lines():
    mounts = _mounts()
    if not mounts:
        return ["- Mounted folders: none."]
    lines = ["- Mounted folders, from the operator:"]
    for path, read_only in mounts[:_MAX_MOUNTS]:
        line = f"    {path} ({'read-only' if read_only else 'writable'}), {_entries(path)}"
        lines.append(line if len(line) <= 100 else line[:99] + "…")
    if len(mounts) > _MAX_MOUNTS:
        lines.append(f"    ... and {len(mounts) - _MAX_MOUNTS} more under {_DATA_ROOT}")
    return lines


_MAX_SERVER_LINES = 6  # keeps the manual on one screen


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

    session = _in_session()
    fields = {
        "python": sys.version.split()[0],
        "where": "a session's container" if session else "a fresh container",
        "uid": os.getuid(),
        "variant": os.environ.get("BRIDGE_VARIANT") or "unknown",
        "tmp": _tmp(),
        "memory": _memory(),
        "pids": _read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max") or "not limited",
        "cpu": _cpu(),
        "snapshot": _SNAPSHOT_MEMORY if _relay_flag("memory_snapshots") else _SNAPSHOT_FILES,
    }
    lines = [_HEAD.format(**fields), ""]
    lines += (_SESSION if session else _FRESH).format(**fields).splitlines()
    lines += _packages_lines()
    lines += _mounts_lines()
    lines += (_SCRIPT_BACK if _relay_flag("script") else _BACK).splitlines()
    lines += ["", *_TOOLS.splitlines(), "", *_servers_lines()]
    print("\n".join(lines))


help.__module__ = "mcp_tools"
