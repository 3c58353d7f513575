"""The sandbox's own help, and (in later versions of the bridge) the tools of
the MCP servers the operator connected.

    import mcp_tools
    mcp_tools.help()
"""

import os

__all__ = ["help"]

_HELP = """\
bridge sandbox: you are Python {python} in a fresh container, uid {uid}.

- No network: sockets cannot reach anything.
- The filesystem is read-only except /tmp ({tmp}), which is noexec and
  vanishes when the run ends. Nothing is kept between calls.
- Limits: memory {memory}, processes {pids}, CPU {cpu}; the call's timeout
  kills the container, keeping the output printed until then.
- What you print is what the agent gets back (stdout, then stderr); output
  beyond the cap is cut and counted. Print only what is needed.
- Top-level `await` works: `await asyncio.gather(...)` runs things side by side.
- Python's standard library is here; pip and the network are not.
- No MCP servers are connected to this bridge yet.
"""


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
    if not v or v == "max" or int(v) >= 1 << 60:
        return "not limited"
    return f"{int(v) >> 20} MiB"


def _cpu():
    v = _read("/sys/fs/cgroup/cpu.max")
    if v is None:
        q = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        p = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        v = f"{q} {p}" if q and p else None
    try:
        q, p = v.split()
        return f"{int(q) / int(p):g} cores"
    except (AttributeError, ValueError):
        return "not limited"


def _tmp():
    try:
        st = os.statvfs("/tmp")
        return f"{st.f_blocks * st.f_frsize >> 20} MiB"
    except OSError:
        return "size unknown"


def help():  # noqa: A001 - the name the tool's description promises
    """Print the sandbox's one-screen manual."""
    import sys

    print(_HELP.format(
        python=sys.version.split()[0],
        uid=os.getuid(),
        tmp=_tmp(),
        memory=_memory(),
        pids=_read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max") or "not limited",
        cpu=_cpu(),
    ), end="")
