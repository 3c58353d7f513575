"""The runner's half of "Files out" (docs/protocol.md): sends the files the
code left in the outputs folder, after the code has ended.

Not part of the sandbox API. runner.py loads this file by its path, only
when the folder is not empty: the image holds it as bytecode, while the
runner's own script is compiled at every start. It lives in mcp_tools'
folder because that is what the image (and the bridge binary) ship.

Nothing is followed: each folder and file is opened relative to its
parent's descriptor with O_NOFOLLOW, so a name the code swaps for a
symbolic link meanwhile fails to open rather than leading elsewhere. Each
file is read only up to the size fstat gave when it was opened, so a file
that a leftover thread still writes cannot hold the run.
"""

import errno
import os
import stat
from binascii import b2a_base64

WALK_MAX_DEPTH = 16  # path parts of a file's name, at most
WALK_MAX_ENTRIES = 10_000  # directory entries looked at, at most
FILE_PIECE = 1 << 20  # bytes of a file in one file_data frame, at most
MAX_SKIP_FRAMES = 100  # file_skip frames; later skips are counted in exit
MAX_NAME_BYTES = 1024
MAX_NAME_PART_BYTES = 255
BAD_NAME_BYTES = 256  # a bad_name's name as reported, escaped and cut

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a file opens at once instead of waiting
# for a writer (fstat then tells it is not a regular file).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def send(send_frame, folder, limits, seen=None):
    """Sends the files of folder through send_frame(msg) within limits
    ({max_files, max_file_bytes, max_bytes}); returns how many skipped
    files went unreported (exit's files_skipped). seen, in a session, maps
    each file already looked at after an earlier call to its (mtime_ns,
    size): such a file is sent again only if it changed."""
    sender = Sender(send_frame, limits, seen)
    sender.run(folder)
    return sender.unreported


def look(folder, seen):
    """Records in seen every file of folder as send would, sending none: a
    restored session's outputs, which its snapshot's calls already sent."""
    try:
        root = os.open(folder, _DIR_FLAGS)
    except OSError:
        return
    try:
        found = []
        Sender(None, {"max_files": 1, "max_file_bytes": 0, "max_bytes": 0})._walk(root, (), found, [WALK_MAX_ENTRIES])
        for mtime, rel, _, _, size in found:
            seen[rel] = (mtime, size)
    finally:
        os.close(root)


def file_name(rel, parts):
    """The name a file goes under (UTF-8, 1 to 1,024 bytes, no empty, . or
    .. part, no part over 255 bytes, no NUL), or None when it has none."""
    if not rel or len(rel) > MAX_NAME_BYTES or b"\0" in rel:
        return None
    for part in parts:
        if part in (b"", b".", b"..") or len(part) > MAX_NAME_PART_BYTES:
            return None
    try:
        return rel.decode("utf-8")  # strict: no surrogates, no overlong forms
    except UnicodeDecodeError:
        return None


def bad_name(rel):
    """A bad name as file_skip reports it: bytes that are not UTF-8
    escaped as \\xNN, cut to BAD_NAME_BYTES at a character boundary."""
    text = rel.replace(b"\0", b"\\x00").decode("utf-8", "backslashreplace")
    return text.encode()[:BAD_NAME_BYTES].decode("utf-8", "ignore") or "?"


def open_below(root, parts):
    """Opens root/parts (root a folder's descriptor, parts bytes) for
    reading, following no symbolic link on the way."""
    fd = root
    try:
        for part in parts[:-1]:
            below = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != root:
                os.close(fd)
            fd = below
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        if fd != root:
            os.close(fd)


class Sender:
    def __init__(self, send_frame, limits, seen=None):
        self._send = send_frame
        self._seen = seen
        self._max_files = limits["max_files"]
        self._max_file_bytes = limits["max_file_bytes"]
        self._max_bytes = limits["max_bytes"]
        self._sent_files = 0
        self._sent_bytes = 0
        self._skip_frames = 0
        self.unreported = 0  # skips beyond MAX_SKIP_FRAMES

    def run(self, folder):
        if self._max_files == 0:
            return  # the bridge takes no files: do not even look
        try:
            root = os.open(folder, _DIR_FLAGS)
        except OSError:
            return  # the code removed the folder, or made it something else
        try:
            found = []
            self._walk(root, (), found, [WALK_MAX_ENTRIES])
            found.sort(key=lambda f: (f[0], f[1]))  # oldest first, ties by name
            for mtime, rel, parts, mode, size in found:
                if self._seen is not None:
                    if self._seen.get(rel) == (mtime, size):
                        continue  # unchanged since a call that looked at it
                    self._seen[rel] = (mtime, size)
                self._one(root, rel, parts, mode, size)
        finally:
            os.close(root)

    def _walk(self, dir_fd, prefix, found, budget):
        """Adds (mtime_ns, name, parts, mode, size) to found for each entry
        below dir_fd that is not a folder, as lstat sees it. budget[0] is
        how many more entries may be looked at."""
        subdirs = []
        try:
            with os.scandir(dir_fd) as entries:
                for entry in entries:
                    if budget[0] <= 0:
                        break
                    budget[0] -= 1
                    try:
                        st = entry.stat(follow_symlinks=False)  # fstatat on dir_fd
                    except OSError:
                        continue  # gone meanwhile
                    parts = prefix + (os.fsencode(entry.name),)
                    if stat.S_ISDIR(st.st_mode):
                        if len(parts) < WALK_MAX_DEPTH:
                            subdirs.append(parts)
                    else:
                        found.append((st.st_mtime_ns, b"/".join(parts), parts, st.st_mode, st.st_size))
        except OSError:
            pass  # an unreadable folder: what it holds is not looked at
        for parts in subdirs:
            if budget[0] <= 0:
                return
            try:
                fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                self._walk(fd, parts, found, budget)
            finally:
                os.close(fd)

    def _skip(self, name, size, reason):
        if self._skip_frames < MAX_SKIP_FRAMES:
            self._skip_frames += 1
            self._send({"type": "file_skip", "name": name, "size": size, "reason": reason})
        else:
            self.unreported += 1

    def _over(self, name, size):
        """Skips a file of that size if it may not be sent; True if it did."""
        if size > self._max_file_bytes:
            self._skip(name, size, "too_large")
        elif self._sent_files >= self._max_files:
            self._skip(name, size, "too_many")
        elif self._sent_bytes + size > self._max_bytes:
            self._skip(name, size, "over_total")
        else:
            return False
        return True

    def _one(self, root, rel, parts, mode, size):
        # A bad name first: file_skip can carry it only as bad_name.
        name = file_name(rel, parts)
        if name is None:
            self._skip(bad_name(rel), size if stat.S_ISREG(mode) else 0, "bad_name")
        elif stat.S_ISLNK(mode):
            self._skip(name, 0, "symlink")
        elif not stat.S_ISREG(mode):
            self._skip(name, 0, "special")
        elif not self._over(name, size):
            try:
                fd = open_below(root, parts)
            except OSError as e:
                self._skip(name, size, "symlink" if e.errno == errno.ELOOP else "unreadable")
                return
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    self._skip(name, 0, "special")
                elif not self._over(name, st.st_size):
                    self._file(fd, name, st)
            finally:
                os.close(fd)

    def _file(self, fd, name, st):
        size = st.st_size
        self._sent_files += 1
        self._sent_bytes += size
        file_id = self._sent_files
        self._send({"type": "file", "id": file_id, "name": name, "size": size})
        status = "complete"
        left = size
        while left > 0 and status == "complete":
            want = min(left, FILE_PIECE)
            chunks = []
            got = 0
            try:
                while got < want:
                    data = os.read(fd, want - got)
                    if not data:
                        status = "changed"  # shorter than fstat said: cut meanwhile
                        break
                    chunks.append(data)
                    got += len(data)
            except OSError:
                status = "unreadable"
            if got:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self._send({"type": "file_data", "id": file_id, "data": b2a_base64(data, newline=False).decode("ascii")})
                left -= got
        if status == "complete":
            now = os.fstat(fd)
            if now.st_size != size or now.st_mtime_ns != st.st_mtime_ns:
                status = "changed"  # written to while read: what went out may be mixed
        self._send({"type": "file_end", "id": file_id, "status": status})
