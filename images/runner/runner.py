"""The bridge's in-container Python runner.

The container starts it as `python3 -I -B /opt/bridge/runner.py`. It connects
to the relay socket, says `hello`, receives one `exec`, runs that code with its
stdout and stderr captured at the file-descriptor level and streamed back, and
reports how the code ended in `exit`. While the code runs, it relays the
code's tool calls and queries (through the module _bridge_relay, which
mcp_tools builds on). Once the code has ended, it sends the files the code
left in /tmp/outputs. The wire protocol is docs/protocol.md (version 3);
everything the host sends is checked against it.

Standard library only, Python 3.10+. Start-up time matters, so modules are
imported only when needed (asyncio only for code that awaits, traceback only
when something fails) and a few constants are spelled out rather than taken
from modules that are slow to import.
"""

from __future__ import annotations

import builtins
import codecs
import io
import json
import linecache
import os
import sys
import threading
import time

# socket.py builds several enum classes when imported; a unix stream socket
# needs none of them, so use the C module it wraps.
import _signal
import _socket
import select

# ast re-exports this flag from _ast; importing ast itself costs more.
from _ast import PyCF_ALLOW_TOP_LEVEL_AWAIT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, NoReturn

PROTOCOL_VERSION = 7
ENV_SOCKET = "BRIDGE_RELAY_SOCKET"
ENV_TOKEN = "BRIDGE_RELAY_TOKEN"
# Where the bridge writes a restored sandbox's new token ("Parking" in
# docs/protocol.md). Set only by an engine that can checkpoint (gVisor):
# without it, the runner cannot park, blocks no signal and keeps no spare
# socket.
ENV_TOKEN_FILE = "BRIDGE_RELAY_TOKEN_FILE"
# Unconnected sockets made before the runner confines itself: each park
# uses one to connect again, so a session (and its restored copies) can be
# parked this many times (a snapshot of its memory, or a restore of one,
# parks it once).
SPARE_SOCKETS = 16
ENV_OUTPUTS = "BRIDGE_OUTPUTS"  # set for the code: where to leave files
# Rlimits the engine cannot set (a Kubernetes pod has no such field), as
# "nofile=1024:1024,nproc=4096:4096": the runner lowers its own before
# the code runs, and the code cannot raise them again.
ENV_RLIMITS = "BRIDGE_RLIMITS"
# "1" where the engine gives the container a network interface (a
# Kubernetes pod always has one): the code may then make no IP socket at
# all, as if it had no network, like a container with none.
ENV_NO_INET = "BRIDGE_NO_INET"
# Prefixes of variables the engine puts in every container and the code
# has no business seeing ("KUBERNETES_": the kubelet's API address), comma
# separated: the runner removes them before the code runs.
ENV_DROP = "BRIDGE_ENV_DROP"

# The folder whose files come back with the result ("Files out" in
# docs/protocol.md). BRIDGE_OUTPUTS set for the runner names another one
# (for runs outside a container, as in tests).
OUTPUTS_DIR = "/tmp/outputs"
# Where the input files the bridge puts before an exec land, read-only
# ("Files in"); BRIDGE_INPUTS names another folder, as BRIDGE_OUTPUTS does.
INPUTS_DIR = "/tmp/inputs"
ENV_INPUTS = "BRIDGE_INPUTS"
PUT_TYPES = frozenset({"put", "put_data", "put_end"})
# What a session's snapshot packs, and a restore unpacks into: the run's
# /tmp (BRIDGE_TMP names another folder, for tests).
ENV_TMP = "BRIDGE_TMP"
TMP_DIR = "/tmp"
# The runner's modules (and mcp_tools), beside this script.
LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
# matplotlib's font cache, built into the image: copied to MPLCONFIGDIR so
# that the first plot of a run does not rebuild it.
MPL_CACHE_DIR = "/opt/bridge/matplotlib"

MAX_FRAME = 16 << 20  # payload bytes, both directions
CODE_FILENAME = "<code>"  # the user's code in tracebacks and linecache
CO_COROUTINE = 0x80  # inspect.CO_COROUTINE; inspect is slow to import
READ_CHUNK = 64 << 10  # the most one stdout/stderr frame carries from the pipe
# Once the code has ended, how long to wait for the output pipes to reach EOF.
# Only a background child that inherited fd 1 or 2 can hold them open longer.
DRAIN_SECONDS = 1.0
# Cap on each of error.message and error.traceback, so that a huge exception
# message can never make the exit frame too large.
ERROR_FIELD_LIMIT = 64 << 10

FILE_LIMIT_KEYS = frozenset({"max_files", "max_file_bytes", "max_bytes"})

# The runner's own exit codes when it cannot report through `exit`.
EXIT_LOST = 1  # the host went away
EXIT_PROTOCOL = 2  # bad environment, malformed frame, or a runner bug

_diag_fd = 2  # replaced by a private dup of the original stderr in main()


def diag(message: str) -> None:
    """Writes a line to the runner's private stderr (the container's log)."""
    try:
        os.write(_diag_fd, f"bridge-runner: {message}\n".encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def die(code: int, message: str) -> NoReturn:
    """Ends the process at once, from any thread; user threads must not keep it alive."""
    diag(message)
    os._exit(code)


# --- framing ---------------------------------------------------------------


class ProtocolError(Exception):
    """The host sent something the protocol does not allow."""


class ConnectionClosed(Exception):
    """The host closed the relay connection."""

    def __init__(self) -> None:
        super().__init__("the bridge closed the connection")


# Made once: json.dumps and json.loads with options build a new encoder or
# decoder at each call, a cost on every tool call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ASCII_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def encode_frame(msg: dict[str, Any]) -> bytes:
    """Encodes one frame. Raises ValueError or TypeError for a message that
    is not valid JSON or is too large, before anything is sent."""
    try:
        payload = _ENCODER.encode(msg).encode()
    except UnicodeEncodeError:
        # A lone surrogate (possible in tool arguments) has no UTF-8 form;
        # as an ASCII escape it reaches the bridge, which decodes it as U+FFFD.
        payload = _ASCII_ENCODER.encode(msg).encode()
    if len(payload) > MAX_FRAME:
        raise ValueError(f"message is {len(payload)} bytes, over the relay's limit of {MAX_FRAME}")
    return len(payload).to_bytes(4, "big") + payload


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def decode_payload(payload: bytes | bytearray) -> dict[str, Any]:
    try:
        msg = _DECODER.decode(payload.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"frame is not UTF-8 JSON: {e}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError("frame is not a JSON object with a string field type")
    return msg


def check_fields(msg: dict[str, Any], required: set[str], optional: frozenset[str] = frozenset()) -> None:
    keys = msg.keys() - {"type"}
    missing = required - keys
    unknown = keys - required - optional
    if missing or unknown:
        raise ProtocolError(
            f"{msg['type']} frame: missing fields {sorted(missing)}, unknown fields {sorted(unknown)}"
        )


def is_int(value: object) -> bool:
    return type(value) is int  # JSON true/false decode to bool, a subclass of int


def check_exec(msg: dict[str, Any]) -> None:
    if msg["type"] != "exec":
        raise ProtocolError(f"expected an exec frame, got {msg['type']!r}")
    check_fields(msg, {"version", "code", "output_limit", "files"}, frozenset({"session", "script", "inputs"}))
    if msg["version"] != PROTOCOL_VERSION or not is_int(msg["version"]):
        raise ProtocolError(f"exec speaks protocol version {msg['version']!r}, runner speaks {PROTOCOL_VERSION}")
    if not isinstance(msg["code"], str):
        raise ProtocolError("exec.code is not a string")
    if not isinstance(msg.get("session", False), bool):
        raise ProtocolError("exec.session is not a boolean")
    if not isinstance(msg.get("script", False), bool):
        raise ProtocolError("exec.script is not a boolean")
    if not is_int(msg.get("inputs", 0)) or msg.get("inputs", 0) < 0:
        raise ProtocolError("exec.inputs is not a non-negative integer")
    if not is_int(msg["output_limit"]) or msg["output_limit"] < 0:
        raise ProtocolError("exec.output_limit is not a non-negative integer")
    files = msg["files"]
    if not isinstance(files, dict) or files.keys() != FILE_LIMIT_KEYS:
        raise ProtocolError(f"exec.files must be an object with exactly the keys {sorted(FILE_LIMIT_KEYS)}")
    for key, value in files.items():
        if not is_int(value) or value < 0:
            raise ProtocolError(f"exec.files.{key} is not a non-negative integer")


def check_tool_result(msg: dict[str, Any]) -> None:
    if msg["type"] != "tool_result":
        raise ProtocolError(f"unexpected {msg['type']!r} frame while the code runs")
    check_fields(msg, {"id"}, frozenset({"result", "error"}))
    if not is_int(msg["id"]):
        raise ProtocolError("tool_result.id is not an integer")
    if ("result" in msg) == ("error" in msg):
        raise ProtocolError("tool_result must have exactly one of result and error")
    if "error" in msg:
        err = msg["error"]
        if not isinstance(err, dict):
            raise ProtocolError("tool_result.error is not an object")
        if err.keys() != {"type", "message"} or not all(isinstance(v, str) for v in err.values()):
            raise ProtocolError("tool_result.error must be {type, message} with string values")


# --- the relay connection --------------------------------------------------


class ToolError(Exception):
    """A tool call or query failed. `type` is the bridge's error type
    (tools_unavailable, unknown_server, unknown_tool, denied, limit, upstream,
    timeout, invalid); `message` says why."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(type, message)  # both in args, so it pickles
        self.type = type
        self.message = message

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


# User code sees it through the _bridge_relay module, not this script.
ToolError.__module__ = "_bridge_relay"


def tool_outcome(reply: dict[str, Any]) -> Any:
    if "error" in reply:
        raise ToolError(reply["error"]["type"], reply["error"]["message"])
    return reply["result"]


def _settle(answers: list[tuple[Any, dict[str, Any]]]) -> None:
    """Runs in an event loop: gives each awaiting call its answer."""
    for fut, reply in answers:
        if not fut.done():  # the awaiting task may have been cancelled
            fut.set_result(reply)


class _Awaiting:
    """An awaiting request's side of the relay: its event loop and future."""

    __slots__ = ("loop", "fut")

    def __init__(self, loop: Any, fut: Any) -> None:
        self.loop = loop
        self.fut = fut


# The operations a query may ask for. Any other op is a protocol error to
# the bridge, which would end the run, so query() refuses it first.
QUERY_OPS = frozenset({"servers", "tools", "search", "skills", "skill_source", "save_skill", "resources", "read_resource"})


class _Waiter:
    """A blocking request's side of the relay: its answer, once read, and
    the lock its thread sleeps on until the answer came or it is asked to
    read the socket itself (see Relay._blocking)."""

    __slots__ = ("reply", "wake", "signaled", "abandoned")

    def __init__(self) -> None:
        self.reply: dict[str, Any] | None = None
        self.wake = threading.Lock()
        self.wake.acquire()
        self.signaled = False  # wake released, not yet taken; under Relay._pending_lock
        # Its caller gave up on it (an exception: a session's interrupt, or
        # one the code's signal handler raised): it is never asked to read,
        # and its answer, if it comes, is dropped. Under Relay._pending_lock.
        self.abandoned = False


# The read buffer: a frame that fits is read with the ones around it, in one
# recv; a larger one goes into a buffer of its own size.
READ_BUFFER = 64 << 10


class Relay:
    """Owns the relay socket. Any thread may send: a lock keeps frames whole.
    One thread at a time reads (it holds _read_lock) and hands each
    tool_result to the caller waiting on its id; tool calls and queries
    share the ids. A thread blocked in a call reads the socket itself when
    no other does, so that its answer wakes it and no other thread (a
    hand-over from a reader thread cost each call a thread switch), and
    hands the other callers' answers to them; when it has its own, another
    waiting caller takes over. The reader thread (start) reads whatever
    comes while no caller reads: answers to awaiting code, a session's
    exec and interrupt, garbage or the bridge's hang-up while the code
    does something else. It waits for the socket in epoll, and a reading
    caller takes the socket out of its events, so that it is not woken by
    the answers the caller reads."""

    def __init__(self, sock: _socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._finished = False  # the exit frame went out; EOF is expected now
        self._pending_lock = threading.Lock()
        # By id: the _Waiter of a blocking request, the _Awaiting of an
        # awaiting one.
        self._pending: dict[int, _Waiter | _Awaiting] = {}
        # Answers to awaiting calls read but not handed to their loops yet:
        # a reading thread hands all it read at once, one wakeup of each
        # loop for them (under _read_lock).
        self._settled: list[tuple[_Awaiting, dict[str, Any]]] = []
        self._next_id = 1
        # Reading: the lock of the one thread that reads, the reader
        # thread's epoll, and the bytes read but not yet taken as frames
        # (buffer[start:end]), or the part read so far of a frame too
        # large for the buffer: all kept here, so that a read cut short
        # (a signal handler of the code's that raises in the main thread
        # while it reads) loses nothing for the next reader. Such an
        # exception between a frame's read and its hand-over would lose
        # that one answer (another thread's call then waits to its
        # timeout): a window of microseconds, for code that raises from
        # signal handlers while threads make calls.
        self._read_lock = threading.Lock()
        self._epoll: Any = None  # the reader thread's, once started
        self._epoll_mask = 0  # the events it waits for; changed with _read_lock held
        self._rbuf = bytearray(READ_BUFFER)
        self._rview = memoryview(self._rbuf)
        self._rstart = 0
        self._rend = 0
        self._big: list[Any] | None = None  # [bytearray, bytes read], of a large frame
        self._pid = os.getpid()
        # A session's state: whether code runs now (an interrupt is only
        # delivered then, and tool calls only made then), and the next
        # exec, handed from the reader thread to the main thread.
        self._state_lock = threading.Lock()
        self._running = False
        self._session = False
        self._next_exec: list[dict[str, Any]] = []
        self._exec_ready = threading.Lock()
        self._exec_ready.acquire()
        self._main_ident = threading.main_thread().ident
        # The input files of the next exec as their frames arrive (an
        # Inputs of lib/mcp_tools/_runner_inputs.py, loaded at the first
        # put), and why they could not be written, for that exec.
        self._inputs: Any = None
        self.input_error: str | None = None
        self.input_restored = False  # the first exec's inputs held a snapshot
        # What parking needs (a Spares of lib/mcp_tools/_runner_park.py),
        # None when the runner was started without ENV_TOKEN_FILE.
        self.spares: Any = None
        self.hello: dict[str, Any] = {}  # the first hello, without its token

    def put(self, msg: dict[str, Any]) -> None:
        """Takes a put, put_data or put_end frame: writes that input."""
        if self._inputs is None:
            module = load_lib("_runner_inputs")
            self._inputs_module = module
            tmp = os.environ.get(ENV_TMP) or TMP_DIR
            self._inputs = module.Inputs(os.environ.get(ENV_INPUTS) or INPUTS_DIR, lambda: load_lib("_runner_snapshot").Unpacker(tmp))
        try:
            self._inputs.handle(msg)
        except self._inputs_module.ProtocolError as e:
            raise ProtocolError(str(e)) from None

    def end_inputs(self, msg: dict[str, Any]) -> None:
        """The exec msg arrived: checks that it counts the inputs put before
        it, and keeps why one could not be written (input_error)."""
        announced = msg.get("inputs", 0)
        if self._inputs is None:
            if announced:
                raise ProtocolError(f"exec says {announced} inputs, none were put")
            self.input_error = None
            return
        inputs, self._inputs = self._inputs, None
        self.input_restored = inputs.restored
        try:
            self.input_error = inputs.finish(announced)
        except self._inputs_module.ProtocolError as e:
            raise ProtocolError(str(e)) from None

    def owned_here(self) -> bool:
        """False in a child the code forked: it shares the socket but has no
        reader thread, and may have inherited a held lock."""
        return os.getpid() == self._pid

    @classmethod
    def connect(cls, path: str) -> Relay:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # close-on-exec
        try:
            sock.connect(path)
        except OSError as e:
            sock.close()
            die(EXIT_LOST, f"cannot connect to the relay socket {path}: {e}")
        return cls(sock)

    # Sending. A failed send means the host is gone: end quietly.

    def send(self, msg: dict[str, Any]) -> None:
        self.send_frame(encode_frame(msg))

    def send_frame(self, frame: bytes) -> None:
        # In a session, an interrupt (SIGINT to the main thread) must not
        # land inside sendall and leave half a frame on the socket: it is
        # held until the frame is out, then raised.
        hold = self._session and threading.get_ident() == self._main_ident
        if hold:
            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
        try:
            with self._send_lock:
                if self._finished:
                    return  # nothing may follow exit
                try:
                    self._sock.sendall(frame)
                except OSError as e:
                    die(EXIT_LOST, f"relay connection lost: {e}")
        finally:
            if hold:
                _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT})

    def finish(self, msg: dict[str, Any]) -> None:
        """Sends the last frame; later sends are dropped."""
        frame = encode_frame(msg)
        with self._send_lock:
            self._finished = True
            try:
                self._sock.sendall(frame)
            except OSError as e:
                die(EXIT_LOST, f"relay connection lost: {e}")

    # Receiving.

    def _fill(self) -> None:
        """Reads what the socket has into the buffer, after what it holds."""
        if self._rstart == self._rend:
            self._rstart = self._rend = 0
        elif self._rend == len(self._rbuf):
            n = self._rend - self._rstart
            self._rbuf[:n] = self._rbuf[self._rstart : self._rend]
            self._rstart, self._rend = 0, n
        k = self._sock.recv_into(self._rview[self._rend :])
        if k == 0:
            raise ConnectionClosed
        self._rend += k

    def recv(self) -> dict[str, Any]:
        """Reads one frame. Raises ConnectionClosed at EOF (also mid-frame)
        and ProtocolError for a malformed frame. Only the thread holding
        _read_lock calls it (or main before any other thread runs)."""
        if self._big is None:
            while self._rend - self._rstart < 4:
                self._fill()
            start = self._rstart
            n = int.from_bytes(self._rbuf[start : start + 4], "big")
            if not 1 <= n <= MAX_FRAME:
                raise ProtocolError(f"frame length {n} is outside 1..{MAX_FRAME}")
            if 4 + n <= len(self._rbuf):
                while self._rend - self._rstart < 4 + n:
                    self._fill()
                    start = self._rstart
                payload = bytes(self._rbuf[start + 4 : start + 4 + n])
                self._rstart = start + 4 + n
                return decode_payload(payload)
            # Larger than the buffer: into one of its own size.
            big = bytearray(n)
            have = self._rend - start - 4
            big[:have] = self._rbuf[start + 4 : self._rend]
            self._rstart = self._rend = 0
            self._big = [big, have]
        big, got = self._big
        view = memoryview(big)
        while got < len(big):
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionClosed
            got += k
            self._big[1] = got
        self._big = None
        return decode_payload(big)

    def _read_one(self) -> None:
        """Reads one frame and acts on it: an answer goes to its caller, a
        session's exec or interrupt to _control. A frame the protocol does
        not allow, or the connection's end while code runs, ends the
        process; after exit, the end raises ConnectionClosed. Called with
        _read_lock held."""
        try:
            msg = self.recv()
            kind = msg["type"]
            if kind == "exec" or kind == "interrupt" or kind == "pack" or kind == "park" or kind in PUT_TYPES:
                self._control(msg)
                return
            check_tool_result(msg)
            with self._pending_lock:
                waiter = self._pending.pop(msg["id"], None)
                if type(waiter) is _Waiter:
                    waiter.reply = msg
                    if not waiter.signaled:
                        waiter.signaled = True
                        waiter.wake.release()
                    return
            if waiter is None:
                raise ProtocolError(f"tool_result for unknown id {msg['id']}")
            self._settled.append((waiter, msg))
            if not self._buffered():
                self._hand_settled()  # nothing more to read at once: hand over now
        except (ProtocolError, ConnectionClosed, OSError) as e:
            if isinstance(e, OSError) and e.errno is None:
                # Not the socket's: the code's signal handler raised it
                # (a TimeoutError, say) in the main thread while it read.
                # Nothing is lost (the buffer keeps what was read); the
                # exception is the code's to handle.
                raise
            if self._finished:
                raise ConnectionClosed from None  # exit is out; main ends the process with the code's status
            with self._state_lock:
                idle = self._session and not self._running
            if idle and isinstance(e, ConnectionClosed):
                os._exit(0)  # the bridge ended the session between two calls
            if isinstance(e, ProtocolError):
                die(EXIT_PROTOCOL, f"relay protocol error: {e}")
            die(EXIT_LOST, f"relay connection lost while the code was running: {e}")

    def _hand_settled(self) -> None:
        """Hands the answers read for awaiting calls to their event loops,
        one callback a loop. Called with _read_lock held."""
        if not self._settled:
            return
        by_loop: dict[Any, list[tuple[Any, dict[str, Any]]]] = {}
        for a, reply in self._settled:
            by_loop.setdefault(a.loop, []).append((a.fut, reply))
        self._settled = []
        for loop, answers in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, answers)
            except RuntimeError:
                pass  # the loop is closed; nobody waits for these answers

    def _watch(self, mask: int) -> None:
        """Sets the events the reader thread waits for. Called with
        _read_lock held."""
        if self._epoll is not None and mask != self._epoll_mask:
            self._epoll.modify(self._sock.fileno(), mask)
            self._epoll_mask = mask

    def start(self) -> None:
        """Starts the reader thread."""
        self._epoll = select.epoll(1)
        self._epoll_mask = select.EPOLLIN
        self._epoll.register(self._sock.fileno(), self._epoll_mask)
        threading.Thread(target=guarded(self._read_loop), name="bridge-relay", daemon=True).start()

    def _read_loop(self) -> None:
        while True:
            # Data, or the connection's end (EPOLLHUP is reported whatever
            # the mask).
            self._epoll.poll()
            with self._read_lock:
                # A caller may have read it meanwhile: read only what is
                # there, never wait on the socket with the lock held.
                try:
                    if self._big is not None or self._epoll.poll(0):
                        self._read_one()
                    self._stop_reading()
                except ConnectionClosed:
                    return  # after exit

    def _buffered(self) -> bool:
        """Whether the read buffer holds a whole frame (or a length the
        protocol refuses): the socket's events no longer tell of it."""
        avail = self._rend - self._rstart
        if self._big is not None or avail < 4:
            return False
        n = int.from_bytes(self._rbuf[self._rstart : self._rstart + 4], "big")
        return avail >= 4 + n or not 1 <= n <= MAX_FRAME

    def _stop_reading(self) -> None:
        """The reading thread is done for now. It first acts on the frames
        it read along with its own (they are in the buffer, where the
        socket's events do not show them); then, if a caller waits for an
        answer, that one reads next (the reader thread's events stay off);
        otherwise the reader thread watches the socket again. Called with
        _read_lock held."""
        while self._buffered():
            self._read_one()
        self._hand_settled()
        # The reader thread watches again before a waiter is woken to read:
        # should that one never read (its caller gives up at that moment),
        # the socket is still read. The waiter turns it off once it reads.
        self._watch(select.EPOLLIN)
        with self._pending_lock:
            for w in self._pending.values():
                if type(w) is _Waiter and not w.signaled and not w.abandoned:
                    w.signaled = True
                    w.wake.release()
                    return

    def _control(self, msg: dict[str, Any]) -> None:
        """A session's frames from the bridge: the next exec and the inputs
        put before it (only between two calls), or an interrupt (acted on
        only while code runs), or a park (between two calls)."""
        if msg["type"] == "park":
            self._park(msg)
            return
        with self._state_lock:
            if msg["type"] in PUT_TYPES or msg["type"] == "pack":
                if not self._session or self._running or self._next_exec:
                    raise ProtocolError(f"{msg['type']} while code runs, or outside a session")
                if msg["type"] == "pack":
                    check_fields(msg, {"max_bytes"})
                    if not is_int(msg["max_bytes"]) or msg["max_bytes"] < 0:
                        raise ProtocolError("pack.max_bytes is not a non-negative integer")
                    load_lib("_runner_snapshot").pack(self.send, os.environ.get(ENV_TMP) or TMP_DIR, msg["max_bytes"])
                    return
                self.put(msg)
                return
            if msg["type"] == "interrupt":
                check_fields(msg, set())
                if self._running:
                    # To the main thread itself, so that a blocking call
                    # there (sleep, a read) is interrupted too.
                    _signal.pthread_kill(self._main_ident, _signal.SIGINT)
                return
            check_exec(msg)
            if not self._session or self._running or self._next_exec:
                raise ProtocolError("exec while code runs, or outside a session")
            self.end_inputs(msg)
            self._next_exec.append(msg)
        self._exec_ready.release()

    def _park(self, msg: dict[str, Any]) -> None:
        """Answers park with parked, lets go of the relay and waits for
        SIGUSR1, then connects to the relay again with a spare socket and
        the token the bridge left in the token file, says hello with
        resumed, and goes on reading. Runs on the reader thread (a park
        comes only between two calls, when no caller reads), with
        _read_lock held; the main thread waits for the next exec."""
        check_fields(msg, set())
        with self._state_lock:
            if not self._session or self._running or self._next_exec or self._inputs is not None:
                raise ProtocolError("park while code runs, before its exec, or outside a session")
        if self.spares is None:
            raise ProtocolError(f"park, but the runner was started without {ENV_TOKEN_FILE}")
        if not self.spares.sockets:
            raise ProtocolError("park, but no spare socket is left (hello said parks: 0)")
        park = load_lib("_runner_park")
        park.drain()
        self.send({"type": "parked"})
        self._epoll.unregister(self._sock.fileno())
        self._sock.close()
        self._rstart = self._rend = 0  # nothing of the old connection is read
        self._big = None
        sock, token = park.wait(self.spares, diag)
        with self._send_lock:
            self._sock = sock
        self._epoll.register(sock.fileno(), self._epoll_mask)
        self.send({**self.hello, "token": token, "parks": len(self.spares.sockets), "resumed": True})

    # A session: the main thread runs one exec after another.

    def begin(self, session: bool) -> None:
        """Code starts running; session says whether another exec may follow."""
        with self._state_lock:
            self._session = session
            self._running = True

    def end(self) -> None:
        """The code stopped running: interrupts are no longer delivered."""
        with self._state_lock:
            self._running = False

    def next_exec(self) -> dict[str, Any]:
        """Waits for the bridge's next exec of this session."""
        self._exec_ready.acquire()
        with self._state_lock:
            return self._next_exec.pop()

    # Tool calls and queries: requests that a tool_result answers.

    def _request(self, kind: str, fields: dict[str, Any], deliver: _Waiter | _Awaiting) -> None:
        """Sends a tool_call or query (kind) with fields under a fresh id;
        deliver gets the tool_result that answers it."""
        with self._pending_lock:
            request_id = self._next_id
            self._next_id += 1
        # Encode first: an argument that is not JSON raises here, to the caller.
        frame = encode_frame({"type": kind, "id": request_id, **fields})
        with self._pending_lock:
            self._pending[request_id] = deliver  # before sending: the answer may come at once
        self.send_frame(frame)

    def _blocking(self, kind: str, fields: dict[str, Any]) -> Any:
        w = _Waiter()
        try:
            self._request(kind, fields, w)
            while w.reply is None:
                # No thread reads: read, until this call's answer came.
                if self._read_lock.acquire(blocking=False):
                    try:
                        self._watch(0)
                        while w.reply is None:
                            self._read_one()
                    except BaseException:
                        self._abandon(w)  # before _stop_reading: not handed the reading
                        raise
                    finally:
                        try:
                            self._stop_reading()
                        finally:
                            self._read_lock.release()
                    break
                # Another thread reads: it wakes this one with the answer, or
                # when it stopped reading and this one should read instead.
                w.wake.acquire()
                with self._pending_lock:
                    w.signaled = False
        except BaseException:
            # A session's interrupt, or an exception the code's signal
            # handler raised, while the call waited or read.
            self._abandon(w)
            raise
        return tool_outcome(w.reply)

    def _abandon(self, w: _Waiter) -> None:
        """w's caller gave up on it (see _Waiter.abandoned)."""
        with self._pending_lock:
            w.abandoned = True

    async def _awaiting(self, kind: str, fields: dict[str, Any]) -> Any:
        import asyncio  # already loaded: an event loop is running

        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._request(kind, fields, _Awaiting(loop, fut))
        return tool_outcome(await fut)

    def _check_here(self) -> None:
        if not self.owned_here():
            raise RuntimeError("tool calls and queries are only available in the process that runs the code, not in a forked child")
        if not self._running:
            raise RuntimeError("tool calls and queries are only available while a call runs, not from a thread left running between a session's calls")

    def _tool_call(self, server: str, tool: str, args: dict[str, Any] | None) -> dict[str, Any]:
        self._check_here()
        if not isinstance(server, str) or not isinstance(tool, str):
            raise TypeError("server and tool must be strings")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise TypeError(f"tool arguments must be a dict, not {type(args).__name__}")
        return {"server": server, "tool": tool, "args": args}

    def _query(self, op: str, args: dict[str, Any] | None) -> dict[str, Any]:
        self._check_here()
        if not isinstance(op, str) or op not in QUERY_OPS:
            raise ValueError(f"query op must be one of {', '.join(sorted(QUERY_OPS))}, not {op!r}")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise TypeError(f"query arguments must be a dict, not {type(args).__name__}")
        return {"op": op, "args": args}

    def call_tool(self, server: str, tool: str, args: dict[str, Any] | None = None) -> Any:
        """Calls a tool and blocks until it answers. Returns its result;
        raises ToolError when the bridge reports an error."""
        return self._blocking("tool_call", self._tool_call(server, tool, args))

    async def acall_tool(self, server: str, tool: str, args: dict[str, Any] | None = None) -> Any:
        """Like call_tool, but awaits the answer without blocking the event loop."""
        return await self._awaiting("tool_call", self._tool_call(server, tool, args))

    def query(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """Asks the bridge about the tools (op servers, tools or search) and
        blocks until it answers. Returns the result; raises ToolError when
        the bridge reports an error."""
        return self._blocking("query", self._query(op, args))

    async def aquery(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """Like query, but awaits the answer without blocking the event loop."""
        return await self._awaiting("query", self._query(op, args))


def publish(relay: Relay, session: bool = False, script: bool = False) -> None:
    """Makes the tool-call plumbing importable by user code (the mcp_tools
    package builds on it) as the module _bridge_relay, with whether the
    code runs in a session or as a script (mcp_tools.help() says what
    each means)."""
    mod = type(sys)("_bridge_relay")
    mod.__doc__ = "Tool calls and queries through the bridge's relay (used by mcp_tools)."
    mod.PROTOCOL_VERSION = PROTOCOL_VERSION
    mod.session = session
    mod.script = script
    # A runner that can park is in a sandbox the bridge can checkpoint: a
    # snapshot of its session keeps it whole (help() says so).
    mod.memory_snapshots = relay.spares is not None
    mod.ToolError = ToolError
    mod.call_tool = relay.call_tool
    mod.acall_tool = relay.acall_tool
    mod.query = relay.query
    mod.aquery = relay.aquery
    sys.modules[mod.__name__] = mod


def guarded(target: Callable[[], None]) -> Callable[[], None]:
    """Wraps the runner's own code (main, its threads) so that a bug in it
    ends the run with a diagnostic instead of hanging it."""

    def run() -> None:
        try:
            target()
        except BaseException:
            import traceback

            die(EXIT_PROTOCOL, "internal error:\n" + traceback.format_exc())

    return run


# --- output capture --------------------------------------------------------


class Forwarder:
    """Reads one captured stream from its pipe and sends it as stdout or
    stderr frames, each carrying whatever had arrived, up to output_limit
    bytes in all; the rest is read (so writers never block) and counted."""

    def __init__(self, relay: Relay, name: str, fd: int, limit: int) -> None:
        self._relay = relay
        self._name = name
        self._fd = fd
        self._limit = limit
        self.sent = 0
        self.cut = 0
        # A multi-byte character may be split across reads.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=guarded(self._run), name=f"bridge-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    data = os.read(self._fd, READ_CHUNK)
                except OSError:
                    data = b""
                with self._lock:
                    if self._stopped:
                        return
                    self._emit(self._decoder.decode(data, final=not data))
                if not data:
                    return
        finally:
            # A session makes a pipe per call: give its end back.
            try:
                os.close(self._fd)
            except OSError:
                pass

    def _emit(self, text: str) -> None:
        if not text:
            return
        # The limit counts UTF-8 bytes of the text sent, as the bridge does.
        size = len(text.encode())
        if self.cut:  # once cut, a stream stays cut
            self.cut += size
            return
        room = self._limit - self.sent
        if size > room:
            text = text.encode()[:room].decode("utf-8", "ignore")  # at a character boundary
            kept = len(text.encode())
            self.cut += size - kept
            size = kept
            if not text:
                return
        self.sent += size
        self._relay.send({"type": self._name, "data": text})

    def stop(self, deadline: float) -> None:
        """Waits until the deadline for EOF, then stops forwarding."""
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._stopped = True


class Capture:
    """Points fds 1 and 2 at pipes drained by Forwarders, so print, direct
    os.write calls, C extensions and subprocesses are all captured."""

    def __init__(self, relay: Relay, limit: int) -> None:
        self._devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(self._devnull, 0)  # input() gets EOF rather than whatever the engine left on stdin
        self._forwarders = []
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()  # both close-on-exec
            os.dup2(w, fd)  # the dup is inheritable: children write into the pipe
            os.close(w)
            self._forwarders.append(Forwarder(relay, name, r, limit))
        # Line-buffered so output streams as it is printed. closefd=False:
        # fd 1 and 2 stay ours to redirect when the code ends.
        self.out = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
        self.err = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
        sys.stdout, sys.stderr = self.out, self.err

    def flush(self) -> None:
        # The code may have replaced sys.stdout or closed it; flush what is there.
        for stream in {id(s): s for s in (sys.stdout, sys.stderr, self.out, self.err)}.values():
            try:
                stream.flush()
            except BaseException:  # whatever a replacement stream's flush raises
                pass

    def close(self) -> tuple[int, int]:
        """Ends the capture and returns the bytes cut from stdout and stderr.
        fds 1 and 2 point at /dev/null afterwards rather than being closed,
        so a lingering thread can't write into a file that reuses the fd."""
        os.dup2(self._devnull, 1)
        os.dup2(self._devnull, 2)
        os.close(self._devnull)  # fds 0, 1 and 2 hold it now
        deadline = time.monotonic() + DRAIN_SECONDS
        for f in self._forwarders:
            f.stop(deadline)
        out, err = self._forwarders
        return out.cut, err.cut


def write_fd(fd: int, text: str) -> None:
    """Writes straight to fd, past any stream object the code may have replaced or closed."""
    data = text.encode("utf-8", "backslashreplace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


# --- running the code ------------------------------------------------------


class Outcome:
    """How the code ended: the exit code, the error object for exit, and
    text to write to the captured stderr as Python would."""

    def __init__(self, exit_code: int = 0, error: dict[str, str] | None = None, report: str = "") -> None:
        self.exit_code = exit_code
        self.error = error
        self.report = report
        self.cuts = (0, 0)  # bytes cut from stdout and stderr


def new_main() -> Any:
    """A fresh __main__ module, so classes defined by the code pickle and
    dataclasses/typing find their module. A session keeps it across calls."""
    main = type(sys)("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    return main


def code_filename(n: int) -> str:
    """The name of the nth piece of code of this process in tracebacks:
    <code>, then <code 2>, <code 3>... for a session's later calls, so that
    a function from an earlier call shows its own lines."""
    return CODE_FILENAME if n <= 1 else f"<code {n}>"


def is_code_filename(name: str) -> bool:
    return name == CODE_FILENAME or (name.startswith("<code ") and name.endswith(">"))


def run_code(source: str, main: Any = None, filename: str = CODE_FILENAME, script: bool = False) -> Outcome:
    """Runs source in main as a notebook cell (the last expression's value
    shown, figures left open sent), or with script as `python3 FILE` would."""
    if main is None:
        main = new_main()
    # Tracebacks, inspect.getsource and pdb read the source from linecache.
    # Split lines as the compiler does (str.splitlines also splits at \f and
    # other characters, which would shift line numbers); mtime None keeps
    # checkcache from dropping an entry that has no file.
    lines = io.StringIO(source, newline=None).readlines()
    linecache.cache[filename] = (len(source), None, lines, filename)
    try:
        code = compile_code(source, lines, filename, main.__dict__, script)
    except BaseException as e:  # SyntaxError, or ValueError for a NUL byte before 3.12
        return failure(e, with_traceback=False)
    interrupted = False
    try:
        if code.co_flags & CO_COROUTINE:  # the code awaits at top level
            import asyncio

            asyncio.run(eval(code, main.__dict__))
        else:
            exec(code, main.__dict__)
    except SystemExit as e:
        outcome = system_exit(e)
    except BaseException as e:
        outcome = failure(e, with_traceback=True)
        interrupted = isinstance(e, KeyboardInterrupt)
    else:
        outcome = Outcome()
    if not script and "matplotlib.pyplot" in sys.modules and _notebook is not None and os.getpid() == _runner_pid:
        try:
            # Interrupted (a session's timeout or cancel): the runner has
            # the interrupt grace to answer, so the figures are not saved.
            _notebook.show_open_figures(save=not interrupted)
        except BaseException as e:  # a session's interrupt while figures are saved
            if outcome.exit_code == 0:
                outcome = failure(e, with_traceback=False)
    return outcome


# --- notebook habits ---------------------------------------------------------

# As in Jupyter, the value of the code's last expression statement is shown,
# display() is a built-in, and plt.show() and the figures left open come back
# as images: lib/_bridge_notebook.py, bytecode in the image (this script is
# compiled at every start). Set by install_notebook; None outside main.
_notebook: Any = None
_runner_pid = os.getpid()  # a child the code forked shows no figures of its own


def install_notebook() -> None:
    global _notebook
    import _bridge_notebook

    _bridge_notebook.install()
    _notebook = _bridge_notebook


def compile_code(source: str, lines: list[str], filename: str, namespace: dict[str, Any], script: bool = False) -> Any:
    if _notebook is not None and not script:
        return _notebook.compile_code(source, lines, filename, namespace)
    return compile(source, filename, "exec", flags=PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def system_exit(e: SystemExit) -> Outcome:
    """Maps SystemExit to an exit code as the interpreter does."""
    code = e.code
    if code is None:
        return Outcome(0)
    if isinstance(code, int):
        return Outcome(code & 0xFF)  # what a process exit status keeps
    return Outcome(1, report=f"{safe_str(code)}\n")


def safe_str(value: object) -> str:
    try:
        return str(value)
    except BaseException:
        return f"<{type(value).__name__} object; str() failed>"


def qualified_name(cls: type) -> str:
    """The exception class as the last line of a traceback names it."""
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


_EXCEPTION_GROUP = getattr(builtins, "BaseExceptionGroup", ())  # 3.11+


def strip_runner_frames(exc: BaseException) -> None:
    """Removes the runner's own frames from exc and the exceptions linked to
    it: one whose traceback starts in the runner loses every frame before
    the first one in the user's code (asyncio's included). Library frames
    called from the user's code stay."""
    runner_globals = globals()
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        tb = e.__traceback__
        if tb is not None and tb.tb_frame.f_globals is runner_globals:
            while tb is not None and not is_code_filename(tb.tb_frame.f_code.co_filename):
                tb = tb.tb_next
            e.__traceback__ = tb
        todo += [e.__cause__, e.__context__]
        if isinstance(e, _EXCEPTION_GROUP):
            todo += e.exceptions


def clip(text: str, limit: int) -> str:
    """Keeps the head and tail of text within limit UTF-8 bytes."""
    data = text.encode("utf-8", "backslashreplace")  # also drops lone surrogates
    if len(data) <= limit:
        return data.decode()
    half = limit // 2
    head = data[:half].decode("utf-8", "ignore")
    tail = data[-half:].decode("utf-8", "ignore")
    return f"{head}\n[... {len(data) - 2 * half} bytes cut ...]\n{tail}"


def failure(e: BaseException, with_traceback: bool) -> Outcome:
    import traceback

    try:
        if with_traceback:
            strip_runner_frames(e)
            text = "".join(traceback.format_exception(e))
        else:  # a SyntaxError's own lines show where; no frames to show
            text = "".join(traceback.format_exception_only(type(e), e))
    except BaseException as fe:
        text = f"{qualified_name(type(e))}: {safe_str(e)}\n(formatting the traceback failed: {safe_str(fe)})\n"
    error = {
        "type": clip(qualified_name(type(e)), ERROR_FIELD_LIMIT),
        "message": clip(safe_str(e), ERROR_FIELD_LIMIT),
        "traceback": clip(text, ERROR_FIELD_LIMIT),
    }
    return Outcome(1, error, text)


# --- files: set-up before the code, sending after it -----------------------


# --- confinement -------------------------------------------------------------

# What the container's seccomp profile cannot say, since the runner itself
# needs it first: once the relay is connected, the process (and the code,
# its threads and children after it) creates no unix socket, so it cannot
# connect to one it finds in a mount, nor send a datagram to one, nor trace
# another process; and where the kernel has Landlock, it opens no file for
# writing outside /tmp and /dev, so not a FIFO it finds in a mount (a
# read-only mount stops writes to files, not to FIFOs).
# docs/security.md says what remains.

# Per architecture: AUDIT_ARCH, the numbers of socket, socketpair, clone,
# clone3, mknod (none on aarch64) and mknodat, and those refused outright: ptrace, process_vm_readv,
# process_vm_writev and pidfd_getfd (the code could otherwise drive another
# process of the container that the filter does not bind, its init, where
# the kernel lets a process trace another of its uid); io_uring_setup,
# _enter and _register (its socket and connect operations would pass the
# socket filter below, and a container runtime's default profile may allow
# it); unshare, setns, keyctl, add_key and request_key. The last five, and
# clone with a namespace flag, the container's profile refuses too; but
# gVisor does not apply that profile (docs/security.md), and answers them
# itself: a user namespace of its own, in which the code would hold every
# capability over what gVisor's kernel does. clone3 is answered ENOSYS
# (its flags are out of a filter's reach), so that glibc falls back to clone.
# mknod makes FIFOs, but no device node (gVisor lets any uid make one).
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, 41, 53, 56, 435, 133, 259, (101, 310, 311, 438, 425, 426, 427, 272, 308, 250, 248, 249)),
    "aarch64": (0xC00000B7, 198, 199, 220, 435, None, 33, (117, 270, 271, 438, 425, 426, 427, 97, 268, 219, 217, 218)),
}
_S_IFMT, _S_IFCHR, _S_IFBLK = 0o170000, 0o020000, 0o060000
# The clone flags that make new namespaces (CLONE_NEWNS, NEWCGROUP,
# NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET), as the container's profile has.
_CLONE_NAMESPACES = 0x7E020000
# Socket families: AF_UNIX (the code makes no unix socket of its own) and
# AF_VSOCK (not bound by a network namespace: on a VM, a way to the
# hypervisor's host) are refused always. Without a network (no_inet), every
# family but AF_NETLINK is refused: an allowlist, so that AF_INET's
# relatives (AF_SMC, AF_XDP, AF_RDS, ...) are closed too.
_AF_UNIX, _AF_NETLINK, _AF_VSOCK = 1, 16, 40
_LANDLOCK_WRITE_FILE = 1 << 1
# Not /proc: writing there reaches other processes (/proc/1/mem); and in
# /dev only the devices a program writes to, not whatever a runtime puts
# there (a pod's /dev/termination-log is a file on the node's disk). Pipes
# and sockets reopened through /proc/self/fd are not in a file hierarchy,
# so Landlock lets them be (print to /dev/stdout works).
_LANDLOCK_WRITABLE = ("/tmp", "/dev/shm", "/dev/pts", "/dev/null", "/dev/zero", "/dev/full", "/dev/tty")


def set_rlimits(spec: str) -> None:
    """Lowers this process's rlimits to spec ("nofile=1024:1024,..."); a
    limit can only go down. Raises ValueError on a malformed spec."""
    if not spec:
        return
    import resource

    names = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}
    for item in spec.split(","):
        name, _, value = item.partition("=")
        soft, _, hard = value.partition(":")
        if name not in names or not soft.isdigit() or not hard.isdigit() or int(soft) > int(hard):
            raise ValueError(f"malformed rlimit {item!r}")
        which = names[name]
        _, cur_hard = resource.getrlimit(which)
        want_hard = int(hard) if cur_hard == resource.RLIM_INFINITY else min(int(hard), cur_hard)
        resource.setrlimit(which, (min(int(soft), want_hard), want_hard))


def confine(no_inet: bool = False) -> int:
    """Installs the seccomp filter (or dies: the code never runs without
    it) and the Landlock rule where the kernel has Landlock. Returns the
    Landlock ABI applied, 0 for none. With no_inet, IP and packet sockets
    are refused too."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    arch = _SECCOMP_ARCH.get(os.uname().machine)
    if arch is None:
        die(EXIT_PROTOCOL, f"the runner confines code on x86_64 and aarch64 only, not {os.uname().machine}")
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        die(EXIT_PROTOCOL, f"no_new_privs: {os.strerror(ctypes.get_errno())}")
    abi = _landlock(libc)
    audit, nr_socket, nr_socketpair, nr_clone, nr_clone3, nr_mknod, nr_mknodat, refused = arch
    deny, allow = 0x00050000 | 1, 0x7FFF0000  # SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    nosys = 0x00050000 | 38  # SECCOMP_RET_ERRNO | ENOSYS
    # (code, jt, jf, k) with jumps as labels, resolved below.
    prog: list[tuple[int, Any, Any, int]] = [
        (0x20, 0, 0, 4),  # ld arch
        (0x15, "nr", "deny", audit),  # another ABI (i386, x32's table): refused
        ("nr", None, None, 0),
        (0x20, 0, 0, 0),  # ld nr
        (0x35, "deny", 0, 0x40000000),  # x32 system calls
        *[(0x15, "deny", 0, nr) for nr in refused],
        (0x15, "clone", 0, nr_clone),
        (0x15, "nosys", 0, nr_clone3),
        *([(0x15, "mknod", 0, nr_mknod)] if nr_mknod is not None else []),
        (0x15, "mknodat", 0, nr_mknodat),
        (0x15, "socket", 0, nr_socket),
        (0x15, "pair", "allow", nr_socketpair),
        ("socket", None, None, 0),
        (0x20, 0, 0, 16),  # ld args[0] (low half): the family
        *(
            [(0x15, "allow", "deny", _AF_NETLINK)]
            if no_inet
            else [(0x15, "deny", 0, _AF_UNIX), (0x15, "deny", "allow", _AF_VSOCK)]
        ),
        ("pair", None, None, 0),
        (0x20, 0, 0, 16),
        (0x15, 0, "allow", 1),  # AF_UNIX
        (0x20, 0, 0, 24),  # ld args[1]: the type
        (0x54, 0, 0, 0xF),  # and the type's bits
        # Connected kinds only: SOCK_STREAM, SOCK_SEQPACKET. A datagram
        # pair (SOCK_DGRAM, or SOCK_RAW, which unix sockets take for one)
        # may sendto any path.
        (0x15, "allow", 0, 1),
        (0x15, "allow", "deny", 5),
        ("clone", None, None, 0),
        (0x20, 0, 0, 16),  # ld args[0] (low half): the flags
        (0x45, "deny", "allow", _CLONE_NAMESPACES),  # jset
        ("nosys", None, None, 0),
        (0x06, 0, 0, nosys),
        ("mknod", None, None, 0),
        (0x20, 0, 0, 24),  # ld args[1] (low half): the mode
        (0x54, 0, 0, _S_IFMT),
        (0x15, "deny", 0, _S_IFCHR),
        (0x15, "deny", "allow", _S_IFBLK),
        ("mknodat", None, None, 0),
        (0x20, 0, 0, 32),  # ld args[2] (low half): the mode
        (0x54, 0, 0, _S_IFMT),
        (0x15, "deny", 0, _S_IFCHR),
        (0x15, "deny", "allow", _S_IFBLK),
        ("allow", None, None, 0),
        (0x06, 0, 0, allow),
        ("deny", None, None, 0),
        (0x06, 0, 0, deny),
    ]
    labels: dict[str, int] = {}
    code: list[tuple[int, Any, Any, int]] = []
    for ins in prog:
        if isinstance(ins[0], str):
            labels[ins[0]] = len(code)
        else:
            code.append(ins)

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    def jump(i: int, to: Any) -> int:
        return to if isinstance(to, int) else labels[to] - i - 1

    filters = (Filter * len(code))(*[Filter(op, jump(i, jt), jump(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)])
    fprog = Prog(len(code), filters)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        die(EXIT_PROTOCOL, f"installing the runner's seccomp filter: {os.strerror(ctypes.get_errno())}")
    return abi


def _landlock(libc: Any) -> int:
    """Lets the process open files for writing only beneath
    _LANDLOCK_WRITABLE, where the kernel has Landlock; returns its ABI, or
    0 where it has none (gVisor, a kernel without it)."""
    import ctypes

    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return 0
    attr = ctypes.c_uint64(_LANDLOCK_WRITE_FILE)  # struct landlock_ruleset_attr, ABI 1
    ruleset = libc.syscall(444, ctypes.byref(attr), 8, 0)
    if ruleset < 0:
        die(EXIT_PROTOCOL, f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")

    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        for path in _LANDLOCK_WRITABLE:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = Beneath(_LANDLOCK_WRITE_FILE, fd)
                if libc.syscall(445, ruleset, 1, ctypes.byref(rule), 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
                    die(EXIT_PROTOCOL, f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.syscall(446, ruleset, 0) != 0:  # landlock_restrict_self
            die(EXIT_PROTOCOL, f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return int(abi)


def make_outputs() -> bool:
    """Creates OUTPUTS_DIR (mode 0700) and tells the code its path. It is
    new in a fresh container; one that exists already may hold another
    run's files, so then no files go out (False)."""
    try:
        os.mkdir(OUTPUTS_DIR, 0o700)
        os.chmod(OUTPUTS_DIR, 0o700)  # whatever the umask left
    except OSError as e:
        diag(f"cannot create {OUTPUTS_DIR}: {e}; no files will be sent")
        return False
    os.environ[ENV_OUTPUTS] = OUTPUTS_DIR
    return True


def copy_mpl_cache() -> None:
    """Copies the regular files of MPL_CACHE_DIR (matplotlib's font cache,
    built with the image) into $MPLCONFIGDIR, creating it. Costs nothing
    without MPLCONFIGDIR, and one failed open without MPL_CACHE_DIR."""
    dest = os.environ.get("MPLCONFIGDIR")
    if not dest:
        return
    try:
        with os.scandir(MPL_CACHE_DIR) as entries:
            os.makedirs(dest, 0o700, exist_ok=True)
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    with open(entry.path, "rb") as fin, open(os.path.join(dest, entry.name), "wb") as fout:
                        fout.write(fin.read())
    except FileNotFoundError as e:
        if e.filename != MPL_CACHE_DIR:
            diag(f"copying matplotlib's cache: {e}")
    except OSError as e:
        diag(f"copying matplotlib's cache: {e}")


def load_lib(name: str) -> Any:
    """Loads lib/mcp_tools/NAME.py by its path (bytecode in the image): the
    runner's own helpers, kept out of this script, which is compiled at
    every start, and loaded only when needed."""
    mod = sys.modules.get("_bridge" + name)
    if mod is not None:
        return mod
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bridge" + name, os.path.join(LIB_DIR, "mcp_tools", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[spec.name] = mod
    return mod


def send_files(relay: Relay, limits: dict[str, int], seen: dict[bytes, tuple[int, int]] | None = None) -> int:
    """Sends the files the code left in OUTPUTS_DIR ("Files out" in
    docs/protocol.md) and returns how many skipped files went unreported.
    An empty folder costs one open and one read of it; otherwise the
    sending code is loaded from lib/mcp_tools/_runner_files.py (bytecode in
    the image), so that this script, compiled at every start, stays short."""
    if limits["max_files"] == 0:
        return 0  # the bridge takes no files: do not even look
    try:
        with os.scandir(OUTPUTS_DIR) as entries:
            if next(entries, None) is None:
                return 0
    except OSError:
        return 0  # the code removed it, or made it something else
    import importlib.util

    path = os.path.join(LIB_DIR, "mcp_tools", "_runner_files.py")
    spec = importlib.util.spec_from_file_location("_bridge_runner_files", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.send(relay.send, OUTPUTS_DIR, limits, seen)


# --- main ------------------------------------------------------------------


def main() -> NoReturn:
    global _diag_fd
    try:
        # fd 2 is about to become the code's stderr; keep our own channel.
        _diag_fd = os.dup(2)
    except OSError:
        pass

    # The code and its children have no use for these.
    path = os.environ.pop(ENV_SOCKET, "")
    token = os.environ.pop(ENV_TOKEN, "")
    token_file = os.environ.pop(ENV_TOKEN_FILE, "")
    if token_file:
        # Before any thread starts, so that every thread blocks it: only a
        # park takes it (sigwait), and it never ends the process.
        _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGUSR1})
    if not path or not token:
        die(EXIT_PROTOCOL, f"{ENV_SOCKET} and {ENV_TOKEN} must be set")
    for prefix in filter(None, os.environ.pop(ENV_DROP, "").split(",")):
        for name in [n for n in os.environ if n.startswith(prefix)]:
            del os.environ[name]
    try:
        set_rlimits(os.environ.pop(ENV_RLIMITS, ""))
    except (ValueError, OSError) as e:
        die(EXIT_PROTOCOL, f"{ENV_RLIMITS}: {e}")

    # Before hello: the run's timeout starts with exec.
    global OUTPUTS_DIR
    OUTPUTS_DIR = os.environ.get(ENV_OUTPUTS) or OUTPUTS_DIR
    outputs = make_outputs()
    copy_mpl_cache()

    no_inet = os.environ.pop(ENV_NO_INET, "") == "1"
    relay = Relay.connect(path)
    v = sys.version_info
    relay.hello = {"type": "hello", "version": PROTOCOL_VERSION, "python": f"{v.major}.{v.minor}.{v.micro}"}
    if token_file:
        # Made before confine(), which refuses new unix sockets.
        spares = [_socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) for _ in range(SPARE_SOCKETS)]
        relay.spares = load_lib("_runner_park").Spares(path, token_file, spares)
        relay.hello["parks"] = SPARE_SOCKETS
    confine(no_inet)
    relay.send({**relay.hello, "token": token})
    # The modules the code may import from the bridge (mcp_tools); -I
    # keeps the runner's own directory off the path. Loaded while a warm
    # container waits for its exec, not on the run's time.
    sys.path.insert(0, LIB_DIR)
    install_notebook()
    try:
        msg = relay.recv()
        while msg["type"] in PUT_TYPES:
            relay.put(msg)
            msg = relay.recv()
        check_exec(msg)
        relay.end_inputs(msg)
    except (ConnectionClosed, OSError):
        die(EXIT_LOST, "relay closed the connection before exec (token or protocol version rejected?)")
    except ProtocolError as e:
        die(EXIT_PROTOCOL, f"relay protocol error: {e}")

    relay.start()
    publish(relay, msg.get("session", False), msg.get("script", False))

    module = new_main()
    seen: dict[bytes, tuple[int, int]] = {}  # a session's files, as last looked at
    if relay.input_restored and outputs:
        # A restored session: its snapshot's outputs were sent by the calls
        # that made them, and come back only if changed.
        load_lib("_runner_files").look(OUTPUTS_DIR, seen)
    n = 0
    while True:
        n += 1
        session = msg.get("session", False)
        outcome = run_once(relay, msg, module, code_filename(n), session)
        if not relay.owned_here():
            # A child forked by the code ran to its end. Its output went into the
            # pipes; the exit frame is the parent's to send.
            os._exit(outcome.exit_code)
        stdout_cut, stderr_cut = outcome.cuts
        files_skipped = 0
        if outputs:
            files_skipped = send_files(relay, msg["files"], seen if session else None)
        exit_msg: dict[str, Any] = {
            "type": "exit",
            "status": "ok" if outcome.exit_code == 0 else "error",
            "exit_code": outcome.exit_code,
            "stdout_cut": stdout_cut,
            "stderr_cut": stderr_cut,
            "files_skipped": files_skipped,
        }
        if outcome.error is not None:
            exit_msg["error"] = outcome.error
        if not session:
            relay.finish(exit_msg)
            # Lingering user threads and children must not keep the run alive, and
            # nothing the code registered (atexit, finalizers) may write any more.
            os._exit(outcome.exit_code)
        # A session: the interpreter, its variables and /tmp stay for the
        # next call; the bridge ends the session by closing the connection.
        relay.send(exit_msg)
        msg = relay.next_exec()


def run_once(relay: Relay, msg: dict[str, Any], module: Any, filename: str, session: bool) -> Outcome:
    """Runs one exec's code with its output captured, and returns how it
    ended, the bytes cut from stdout and stderr in outcome.cuts. In a
    session an interrupt from the bridge raises KeyboardInterrupt in the
    code (the code may have replaced the handler: then it is the code's).
    Once the code has stopped, a late interrupt is ignored."""
    if relay.input_error is not None:
        # The code counts on its inputs: it does not run without them.
        return Outcome(1, {"type": "InputError", "message": relay.input_error})
    capture = Capture(relay, msg["output_limit"])
    if session:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    relay.begin(session)
    try:
        outcome = run_code(msg["code"], module, filename, msg.get("script", False))
    except KeyboardInterrupt as e:  # an interrupt just as the code ended
        outcome = failure(e, with_traceback=False)
    # A late interrupt may still be raised while these run: retry them.
    while relay.owned_here():
        try:
            relay.end()
            if session:
                _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
            break
        except KeyboardInterrupt:
            pass
    capture.flush()
    if outcome.report:
        write_fd(2, outcome.report)
    if relay.owned_here():
        outcome.cuts = capture.close()
    return outcome


if __name__ == "__main__":
    guarded(main)()
