"""The runner's half of "Files in" (docs/protocol.md): writes the input
files the bridge puts before an exec into the inputs folder, read-only.

Not part of the sandbox API. runner.py loads this file by its path, only
when a put frame arrives, as it loads _runner_files.

Nothing is followed: each folder is opened relative to its parent's
descriptor with O_NOFOLLOW, so a symbolic link that code of an earlier
call of a session left in the folder fails the write rather than leading
elsewhere; and the folder opened must be the very entry its parent holds
(lstat of the name against fstat of the descriptor), since a kernel that
follows the link anyway (gVisor's, with O_DIRECTORY) must not decide it. A file that cannot be written (the run's /tmp is full, a name
the code took for something else) is reported once the exec arrives, and
the code does not run; the frames that follow it are still read and
checked, so the connection stays in step.
"""

import binascii
import errno
import os

FILE_PIECE = 1 << 20  # bytes of one put_data, at most
MAX_NAME_BYTES = 1024
MAX_NAME_PART_BYTES = 255

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_MODE = 0o555  # read-only for the code, once written
_FILE_MODE = 0o444


class ProtocolError(Exception):
    """A put frame the protocol does not allow."""


def _is_int(v):
    return type(v) is int


def check_path(path):
    """Raises ProtocolError unless path is a name the protocol allows: 1 to
    1024 bytes of UTF-8, "/"-separated parts not empty, "." or "..", at
    most 255 bytes each, no NUL."""
    if not isinstance(path, str):
        raise ProtocolError("put.path is not a string")
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError("put.path is not UTF-8") from None
    if not 1 <= len(raw) <= MAX_NAME_BYTES or b"\0" in raw:
        raise ProtocolError(f"put.path must be 1 to {MAX_NAME_BYTES} bytes without NUL")
    for part in raw.split(b"/"):
        if part in (b"", b".", b"..") or len(part) > MAX_NAME_PART_BYTES:
            raise ProtocolError(f"put.path {path[:40]!r} has an empty, . or .. part, or one over 255 bytes")


class Inputs:
    """The input files of one exec, as their frames arrive."""

    def __init__(self, root, unpacker=None):
        self.root = root
        # unpacker() makes what takes a put with archive: true (a restored
        # session's /tmp, _runner_snapshot.Unpacker): feed(data), close().
        self._unpacker = unpacker
        self.count = 0  # files announced
        self.error = None  # the first file that could not be written, why
        self.restored = False  # an archive (a snapshot's /tmp) was unpacked
        self._cur = None  # [id, path, size, written, fd or None]
        self._dirs = {}  # folder path under root → descriptor, made read-only at the end

    def handle(self, msg):
        """Takes one put, put_data or put_end frame."""
        kind = msg["type"]
        if kind == "put":
            self._put(msg)
        elif kind == "put_data":
            self._data(msg)
        else:
            self._end(msg)

    def _fields(self, msg, keys):
        if msg.keys() != keys:
            raise ProtocolError(f"{msg['type']} frame must have exactly the keys {sorted(keys)}")
        if not _is_int(msg["id"]) or msg["id"] <= 0:
            raise ProtocolError(f"{msg['type']}.id is not a positive integer")

    def _put(self, msg):
        archive = "archive" in msg
        if archive and msg.pop("archive") is not True:
            raise ProtocolError("put.archive must be true when given")
        self._fields(msg, {"type", "id", "path", "size"})
        if self._cur is not None:
            raise ProtocolError(f"put {msg['id']} before put {self._cur[0]} ended")
        if msg["id"] != self.count + 1:
            raise ProtocolError(f"put id {msg['id']}, want {self.count + 1}")
        check_path(msg["path"])
        if not _is_int(msg["size"]) or msg["size"] < 0:
            raise ProtocolError("put.size is not a non-negative integer")
        self.count += 1
        if archive:
            if self.count != 1 or self._unpacker is None:
                raise ProtocolError("only the first put before an exec may be an archive")
            self._cur = [msg["id"], msg["path"], msg["size"], 0, None, self._unpacker()]
            return
        fd = None
        if self.error is None:
            try:
                fd = self._create(msg["path"])
            except OSError as e:
                self._fail(msg["path"], e)
        self._cur = [msg["id"], msg["path"], msg["size"], 0, fd, None]

    def _data(self, msg):
        self._fields(msg, {"type", "id", "data"})
        cur = self._cur
        if cur is None or msg["id"] != cur[0]:
            raise ProtocolError(f"put_data for input {msg['id']}, which is not being put")
        if not isinstance(msg["data"], str):
            raise ProtocolError("put_data.data is not a string")
        try:
            data = binascii.a2b_base64(msg["data"])
        except binascii.Error as e:
            raise ProtocolError(f"put_data.data is not base64: {e}") from None
        if not 1 <= len(data) <= FILE_PIECE or len(data) > cur[2] - cur[3]:
            raise ProtocolError(f"put_data of {len(data)} bytes for input {cur[0]}: more than announced, or not 1 to {FILE_PIECE}")
        cur[3] += len(data)
        if cur[5] is not None:
            cur[5].feed(data)
        elif cur[4] is not None:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(cur[4], view) :]
            except OSError as e:
                self._close(cur)
                self._fail(cur[1], e)

    def _end(self, msg):
        self._fields(msg, {"type", "id"})
        cur = self._cur
        if cur is None or msg["id"] != cur[0]:
            raise ProtocolError(f"put_end for input {msg['id']}, which is not being put")
        if cur[3] != cur[2]:
            raise ProtocolError(f"put_end of input {cur[0]} after {cur[3]} of its {cur[2]} bytes")
        self._cur = None
        if cur[5] is not None:
            why = cur[5].close()
            if why is not None and self.error is None:
                self.error = f"the snapshot could not be restored in /tmp: {why}"
            self.restored = why is None
        elif cur[4] is not None:
            try:
                os.fchmod(cur[4], _FILE_MODE)
            except OSError as e:
                self._fail(cur[1], e)
            self._close(cur)

    def finish(self, announced):
        """The exec arrived, saying how many inputs were put: returns the
        error that keeps the code from running, or None."""
        if self._cur is not None:
            raise ProtocolError(f"exec before put_end of input {self._cur[0]}")
        if announced != self.count:
            raise ProtocolError(f"exec says {announced} inputs, {self.count} were put")
        for fd in self._dirs.values():
            try:
                os.fchmod(fd, _DIR_MODE)
            except OSError:
                pass
            os.close(fd)
        self._dirs = {}
        return self.error

    def _fail(self, path, e):
        if self.error is not None:
            return
        where = os.path.join(self.root, path)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            why = "the sandbox's /tmp is full: pass fewer or smaller inputs, or ask the operator for a larger sandbox.tmp_size"
        elif e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EEXIST):
            why = "its folder or name is taken by something else (a link or file the code made): remove it, or use another path"
        else:
            why = os.strerror(e.errno) if e.errno else str(e)
        self.error = f"input {where} could not be written: {why}"

    def _close(self, cur):
        if cur[4] is not None:
            os.close(cur[4])
            cur[4] = None

    def _create(self, path):
        """Opens path under root for writing, new and empty, creating its
        folders; a file of that name from an earlier call is replaced."""
        parts = path.split("/")
        fd = self._folder("", None, self.root)
        for i, part in enumerate(parts[:-1]):
            fd = self._folder("/".join(parts[: i + 1]), fd, part)
        name = parts[-1]
        try:
            return os.open(name, _FILE_FLAGS, 0o600, dir_fd=fd)
        except FileExistsError:
            os.unlink(name, dir_fd=fd)  # an earlier call's input: replaced (a folder raises)
            return os.open(name, _FILE_FLAGS, 0o600, dir_fd=fd)

    def _folder(self, key, parent, name):
        """Opens (creating) folder name in parent (name is absolute when
        parent is None), writable until finish makes it read-only again;
        key is its path under root, by which it is opened once an exec."""
        fd = self._dirs.get(key)
        if fd is not None:
            return fd
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        try:
            st, entry = os.fstat(fd), os.lstat(name, dir_fd=parent)
            if (st.st_dev, st.st_ino) != (entry.st_dev, entry.st_ino):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
            os.fchmod(fd, 0o755)
        except OSError:
            os.close(fd)
            raise
        self._dirs[key] = fd
        return fd
