"""The runner's half of a session's snapshot (docs/protocol.md, "Snapshots"):
packs /tmp as a tar stream when the bridge sends pack, and unpacks one put
with archive: true into /tmp before a restored session's first exec.

Not part of the sandbox API; loaded by its path, only when needed, as
_runner_files is.

Packing is two passes over the folder: the first stats every entry and
sums the archive's exact size (tar headers are a function of the stat), so
the bridge is told the size before a byte is sent and can refuse it at
once; the second sends each file's bytes, exactly as many as the first
pass saw (a file that shrank meanwhile is padded with zeros, one that grew
is cut), so the stream is always the size announced. Nothing is followed:
folders and files are opened relative to their parent's descriptor with
O_NOFOLLOW. Unpacking writes the same way, never through a link, and
refuses names that leave the folder.
"""

import os
import stat
import tarfile
import threading
from binascii import b2a_base64

BLOCK = 512
PIECE = 1 << 20  # bytes of one file_data frame, at most
MAX_ENTRIES = 100_000  # entries packed, at most
MAX_DEPTH = 64
ARCHIVE_NAME = "tmp.tar"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _padded(n):
    return (n + BLOCK - 1) // BLOCK * BLOCK


def _info(rel, st):
    """The TarInfo of an entry, or None for what is not packed (sockets,
    FIFOs, devices)."""
    ti = tarfile.TarInfo(rel)
    ti.mode = stat.S_IMODE(st.st_mode)
    ti.mtime = int(st.st_mtime)
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    if stat.S_ISREG(st.st_mode):
        ti.type, ti.size = tarfile.REGTYPE, st.st_size
    elif stat.S_ISDIR(st.st_mode):
        ti.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        ti.type = tarfile.SYMTYPE
    else:
        return None
    return ti


def _header(ti):
    return ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _walk(root):
    """The entries under root as (relative path, TarInfo, parent fd, name),
    folders before what they hold; and how many were left out."""
    out, skipped = [], 0
    stack = [("", os.open(root, _DIR_FLAGS), 0)]
    fds = [stack[0][1]]
    while stack:
        prefix, dfd, depth = stack.pop()
        try:
            names = sorted(os.listdir(dfd))
        except OSError:
            continue
        for name in names:
            rel = prefix + name
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                skipped += 1
                continue
            ti = _info(rel, st)
            if ti is None or len(out) >= MAX_ENTRIES:
                skipped += 1
                continue
            if ti.type == tarfile.SYMTYPE:
                try:
                    ti.linkname = os.readlink(name, dir_fd=dfd)
                except OSError:
                    skipped += 1
                    continue
            out.append((rel, ti, dfd, name))
            if ti.type == tarfile.DIRTYPE and depth < MAX_DEPTH:
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
                except OSError:
                    continue
                fds.append(sub)
                stack.append((rel + "/", sub, depth + 1))
    return out, skipped, fds


def pack(send, root, max_bytes):
    """Sends root as one tar file (file, file_data..., file_end) through
    send(msg), or a file_skip too_large when it is over max_bytes. Returns
    the entries left out (sockets, FIFOs, devices, unreadable ones)."""
    entries, skipped, fds = _walk(root)
    try:
        headers = [_header(ti) for _, ti, _, _ in entries]
        total = sum(len(h) + _padded(ti.size) for h, (_, ti, _, _) in zip(headers, entries)) + 2 * BLOCK
        if total > max_bytes:
            send({"type": "file_skip", "name": ARCHIVE_NAME, "size": total, "reason": "too_large"})
            return skipped
        send({"type": "file", "id": 1, "name": ARCHIVE_NAME, "size": total})
        buf = bytearray()

        def put(b):
            buf.extend(b)
            while len(buf) >= PIECE:
                send({"type": "file_data", "id": 1, "data": b2a_base64(bytes(buf[:PIECE]), newline=False).decode()})
                del buf[:PIECE]

        for h, (_, ti, dfd, name) in zip(headers, entries):
            put(h)
            if ti.type == tarfile.REGTYPE:
                _copy(put, dfd, name, ti.size)
                put(bytes(_padded(ti.size) - ti.size))
        put(bytes(2 * BLOCK))
        if buf:
            send({"type": "file_data", "id": 1, "data": b2a_base64(bytes(buf), newline=False).decode()})
        send({"type": "file_end", "id": 1, "status": "complete"})
        return skipped
    finally:
        for fd in fds:
            os.close(fd)


def _copy(put, dfd, name, size):
    """Puts exactly size bytes of file name: zeros for what it no longer
    holds (or all of it, if it cannot be opened)."""
    left = size
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
    except OSError:
        fd = -1
    try:
        while left > 0 and fd >= 0:
            chunk = os.read(fd, min(left, PIECE))
            if not chunk:
                break
            put(chunk)
            left -= len(chunk)
    except OSError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)
    while left > 0:
        n = min(left, PIECE)
        put(bytes(n))
        left -= n


class Unpacker:
    """Unpacks a tar stream fed in pieces into root, on a thread of its own
    reading a pipe: nothing is held whole, nothing is followed."""

    def __init__(self, root):
        self.root = root
        self.error = None
        r, self._w = os.pipe()
        self._reader = os.fdopen(r, "rb")
        self._thread = threading.Thread(target=self._run, name="bridge-unpack", daemon=True)
        self._thread.start()

    def feed(self, data):
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._w, view) :]
        except OSError:
            pass  # the unpacker stopped: its error says why

    def close(self):
        """Ends the stream and returns why it could not be unpacked, or None."""
        os.close(self._w)
        self._thread.join()
        return self.error

    def _run(self):
        dirs = {}
        modes = []
        try:
            with tarfile.open(fileobj=self._reader, mode="r|") as tf:
                for m in tf:
                    self._member(tf, m, dirs, modes)
        except Exception as e:  # noqa: BLE001 - any failure is the restore's error
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"
        finally:
            for fd, mode in modes:
                try:
                    os.fchmod(fd, mode)
                except OSError:
                    pass
            for fd in dirs.values():
                os.close(fd)
            try:
                while self._reader.read(PIECE):
                    pass  # drain, so the feeder never blocks
            finally:
                self._reader.close()

    def _folder(self, dirs, parts):
        key = "/".join(parts)
        fd = dirs.get(key)
        if fd is not None:
            return fd
        parent = self._folder(dirs, parts[:-1]) if parts else None
        name = parts[-1] if parts else self.root
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        if parts:
            os.fchmod(fd, 0o700)  # writable while unpacking; its own mode at the end
        dirs[key] = fd
        return fd

    def _member(self, tf, m, dirs, modes):
        parts = m.name.split("/")
        if not m.name or m.name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"the snapshot holds a name that leaves /tmp: {m.name[:80]!r}")
        mode = stat.S_IMODE(m.mode) & 0o777
        if m.isdir():
            fd = self._folder(dirs, parts)
            modes.append((fd, mode))
            return
        parent = self._folder(dirs, parts[:-1])
        name = parts[-1]
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        if m.issym():
            os.symlink(m.linkname, name, dir_fd=parent)
            return
        if not m.isreg():
            return  # the bridge never packs other kinds
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            src = tf.extractfile(m)
            while True:
                chunk = src.read(PIECE)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.utime(fd, (m.mtime, m.mtime))
        finally:
            os.close(fd)
