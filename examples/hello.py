# A first look inside the bridge sandbox: who the code runs as, what it can
# reach and write, and top-level await (no asyncio.run needed).
#
#   bin/bridge run examples/hello.py      (or: make demo)
import asyncio
import os
import platform
import socket
import tempfile


async def probe(name, check):
    # Each check runs in a thread; gather runs them side by side.
    return name, await asyncio.to_thread(check)


def user():
    return f"uid {os.getuid()}, gid {os.getgid()} (65534 is 'nobody')"


def network():
    # Only local facts: the interfaces the container has. No packet leaves.
    names = [name for _, name in socket.if_nameindex()]
    return f"interfaces {names}" + (" -> no network" if names == ["lo"] else "")


def writable(directory):
    # Creates and removes a file, so nothing is left behind either way.
    try:
        fd, path = tempfile.mkstemp(dir=directory, prefix=".hello-")
    except OSError as e:
        return f"{directory} is not writable ({e.strerror})"
    os.close(fd)
    os.unlink(path)
    return f"{directory} is writable"


print(f"Hello from Python {platform.python_version()} in the bridge sandbox")
results = await asyncio.gather(
    probe("user", user),
    probe("network", network),
    probe("root fs", lambda: writable("/")),
    probe("scratch", lambda: writable(tempfile.gettempdir())),
)
for name, text in results:
    print(f"  {name:8} {text}")
