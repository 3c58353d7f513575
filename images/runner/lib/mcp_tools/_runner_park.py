"""The runner's half of parking (docs/protocol.md, "Parking"): between two
calls of a session, the bridge may ask the runner to let go of the relay so
that the sandbox can be checkpointed whole (gVisor cannot save a connected
host socket), and to connect anew once the sandbox is restored.

Not part of the sandbox API; loaded by its path, only when a park comes,
as _runner_files is.

The runner cannot make a socket once it has confined itself (its seccomp
filter refuses AF_UNIX sockets), so it makes a few unconnected ones before
(Spares), and a park uses one to come back. The environment is frozen in a
checkpoint, so the new run's token is read from a file the bridge writes in
the restored sandbox's run folder. SIGUSR1 is blocked in every thread from
the start (the runner blocks it before any thread starts), so that it is
taken only here, by sigwait: one that comes at another time stays pending
and is dropped by the next park before it waits.
"""

import errno
import os

import _signal

# Read at most this much of the token file: the bridge's tokens are short,
# and hello refuses more than 256 bytes.
MAX_TOKEN_FILE = 1024
# A connect that fails with one of these leaves the socket unconnected and
# usable again: the listener is not there yet, so wait for another signal.
_NOT_YET = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN})


class Spares:
    """What a park needs: the relay's path, the token file's, and the
    unconnected sockets made before the runner confined itself."""

    def __init__(self, path, token_file, sockets):
        self.path = path
        self.token_file = token_file
        self.sockets = list(sockets)


def drain():
    """Drops a SIGUSR1 that came before the park (sent by anyone): it must
    not wake the park at once."""
    while _signal.sigtimedwait({_signal.SIGUSR1}, 0) is not None:
        pass


def wait(spares, diag):
    """Waits for SIGUSR1 until the runner connects to the relay again:
    returns the connected socket and the token read from the token file. A
    signal that comes before the bridge is ready (no token file, no
    listener) is told in diag and waited past."""
    while True:
        _signal.sigwait({_signal.SIGUSR1})
        token = _read_token(spares.token_file, diag)
        if token is None:
            continue
        sock = _connect(spares, diag)
        if sock is not None:
            return sock, token


def _read_token(path, diag):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            data = os.read(fd, MAX_TOKEN_FILE)
        finally:
            os.close(fd)
        token = data.decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as e:
        diag(f"woken from a park, but the token file {path} cannot be read ({e}); waiting for another SIGUSR1")
        return None
    if not token:
        diag(f"woken from a park, but the token file {path} is empty; waiting for another SIGUSR1")
        return None
    return token


def _connect(spares, diag):
    """Connects the last spare socket to the relay. One the code has closed
    or replaced (it can see the runner's descriptors) is dropped for the
    next; a listener not there yet leaves the spare for the next signal."""
    while spares.sockets:
        sock = spares.sockets[-1]
        try:
            sock.connect(spares.path)
        except OSError as e:
            if e.errno in _NOT_YET:
                diag(f"woken from a park, but the relay {spares.path} is not there yet ({e}); waiting for another SIGUSR1")
                return None
            diag(f"a spare socket is unusable ({e}); trying the next one")
            spares.sockets.pop()
            try:
                sock.close()
            except OSError:
                pass
            continue
        spares.sockets.pop()
        return sock
    diag("no spare socket is left to connect to the relay with")
    os._exit(1)
