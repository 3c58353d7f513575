"""Tests for runner.py, without a container.

Each test starts a fake relay (a unix socket in a temporary directory that
speaks docs/protocol.md), runs runner.py against it as a subprocess, and
checks the frames it received. Every wait has a timeout, so a broken runner
fails a test rather than hanging it.

Run from the repository root: python3 -m unittest discover -s images/runner -v
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Callable

RUNNER = Path(__file__).with_name("runner.py")
TOKEN = "test-token-0123456789"
TIMEOUT = 20.0  # seconds for any one run
MAX_FRAME = 16 << 20
VERSION = 7
# The spare sockets a parking runner makes (SPARES, read from
# the file: the runner is started as a process, not imported).
SPARES = int(next(line.split("=")[1] for line in RUNNER.read_text().splitlines() if line.startswith("SPARE_SOCKETS =")))
FILES = {"max_files": 20, "max_file_bytes": 1 << 20, "max_bytes": 4 << 20}

# The runner with its matplotlib cache in a test's temporary directory,
# not /opt/bridge/matplotlib.
BOOTSTRAP = """\
import sys
sys.path.insert(0, sys.argv[1])
import runner
del sys.path[0]
runner.MPL_CACHE_DIR = sys.argv[2]
runner.guarded(runner.main)()
"""


def frame(msg: Any) -> bytes:
    payload = json.dumps(msg).encode()
    return len(payload).to_bytes(4, "big") + payload


def exec_frame(code: str, output_limit: int = 64 << 10, files: dict | None = None, session: bool = False, script: bool = False) -> bytes:
    msg = {"type": "exec", "version": VERSION, "code": code, "output_limit": output_limit, "files": files or FILES}
    if session:
        msg["session"] = True
    if script:
        msg["script"] = True
    return frame(msg)


# The fields of each frame the runner may send (docs/protocol.md).
RUNNER_FRAMES = {
    "hello": ({"version", "token", "python"}, {"parks", "resumed"}),
    "parked": (set(), set()),
    "stdout": ({"data"}, set()),
    "stderr": ({"data"}, set()),
    "tool_call": ({"id", "server", "tool"}, {"args"}),
    "query": ({"id", "op", "args"}, set()),
    "file": ({"id", "name", "size"}, set()),
    "file_data": ({"id", "data"}, set()),
    "file_end": ({"id", "status"}, set()),
    "file_skip": ({"name", "size", "reason"}, set()),
    "exit": ({"status", "exit_code"}, {"error", "stdout_cut", "stderr_cut", "files_skipped"}),
}
SKIP_REASONS = {"symlink", "special", "too_large", "over_total", "too_many", "unreadable", "bad_name"}


def valid_name(name: str) -> bool:
    data = name.encode("utf-8")  # a lone surrogate raises: not UTF-8
    parts = name.split("/")
    return 1 <= len(data) <= 1024 and "\0" not in name and all(p not in ("", ".", "..") and len(p.encode()) <= 255 for p in parts)


class FileFrames:
    """Checks the file frames of one run as the bridge would, and collects
    the files: name -> (bytes, status), and the skips in order."""

    def __init__(self, limits: dict) -> None:
        self.limits = limits
        self.files: dict[str, tuple[bytes, str]] = {}
        self.order: list[str] = []  # names of files and skips, as they came
        self.skips: list[dict] = []
        self.pieces: list[int] = []  # decoded sizes of the file_data frames
        self._current: dict | None = None
        self._data = bytearray()
        self._total = 0
        self._base = 0  # files of a session's earlier calls: each call's ids start at 1

    def see(self, msg: dict) -> None:
        t = msg["type"]
        cur = self._current
        if t == "file":
            assert cur is None, f"file {msg} before the end of {cur}"
            assert msg["id"] == len(self.files) - self._base + 1, f"file id {msg['id']}, want {len(self.files) - self._base + 1}"
            assert valid_name(msg["name"]), msg["name"]
            assert msg["name"] not in self.files, f"{msg['name']} sent twice"
            assert type(msg["size"]) is int and 0 <= msg["size"] <= self.limits["max_file_bytes"], msg
            self._total += msg["size"]
            assert self._total <= self.limits["max_bytes"], f"over max_bytes with {msg}"
            assert len(self.files) - self._base < self.limits["max_files"], f"over max_files with {msg}"
            self._current = msg
            self._data = bytearray()
            self.files[msg["name"]] = (b"", "")
        elif t == "file_data":
            assert cur is not None and msg["id"] == cur["id"], f"{msg['type']} outside its file: {msg['id']}"
            piece = base64.b64decode(msg["data"], validate=True)
            assert base64.b64encode(piece).decode() == msg["data"], "not standard padded base64"
            assert 1 <= len(piece) <= 1 << 20, f"piece of {len(piece)} bytes"
            self.pieces.append(len(piece))
            self._data += piece
            assert len(self._data) <= cur["size"], f"{cur['name']}: more than {cur['size']} bytes"
        elif t == "file_end":
            assert cur is not None and msg["id"] == cur["id"], f"file_end outside its file: {msg}"
            assert msg["status"] in ("complete", "changed", "unreadable"), msg
            if msg["status"] == "complete":
                assert len(self._data) == cur["size"], f"{cur['name']} complete with {len(self._data)} of {cur['size']} bytes"
            self.files[cur["name"]] = (bytes(self._data), msg["status"])
            self.order.append(cur["name"])
            self._current = None
        elif t == "file_skip":
            assert cur is None, f"file_skip inside file {cur}"
            assert msg["reason"] in SKIP_REASONS, msg
            assert type(msg["size"]) is int and msg["size"] >= 0, msg
            if msg["reason"] == "bad_name":
                assert 1 <= len(msg["name"].encode()) <= 256, msg
            else:
                assert valid_name(msg["name"]), msg
            self.skips.append(msg)
            self.order.append(msg["name"])
            assert len(self.skips) <= 100, "more than 100 file_skip frames"
        elif t == "exit":
            assert cur is None, f"exit inside file {cur}"
            self._base = len(self.files)
            self._total = 0


class FakeHost:
    """One run's relay: accepts the runner's connection, answers hello with
    `first` (an exec frame unless a test wants something else), then records
    every frame. on_frame(host, msg) sees each frame after hello and may
    answer (host.send) or hang up (host.close)."""

    def __init__(self, first: bytes, on_frame: Callable[[FakeHost, dict], None] | None = None, files: dict | None = None) -> None:
        self.first = first
        self.on_frame = on_frame
        self.frames: list[dict] = []
        self.session = False  # frames may follow exit
        self.file_frames = FileFrames(files or FILES)
        self.error: BaseException | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="bridge-runner-test-")
        self.path = os.path.join(self._dir.name, "relay.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(1)
        self._listener.settimeout(TIMEOUT)
        self._conn: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def send(self, msg: Any) -> None:
        self.send_raw(frame(msg))

    def send_raw(self, data: bytes) -> None:
        with self._send_lock:
            assert self._conn is not None
            self._conn.sendall(data)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.shutdown(socket.SHUT_RDWR)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self._conn.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def _serve(self) -> None:
        try:
            self._conn, _ = self._listener.accept()
            self._conn.settimeout(TIMEOUT)
            while True:
                header = self._recv_exact(4)
                if header is None:
                    return
                n = int.from_bytes(header, "big")
                if not 1 <= n <= MAX_FRAME:
                    raise AssertionError(f"runner sent a frame of {n} bytes")
                payload = self._recv_exact(n)
                if payload is None:
                    raise AssertionError("runner closed the connection mid-frame")
                msg = json.loads(payload)
                required, optional = RUNNER_FRAMES[msg["type"]]
                keys = msg.keys() - {"type"}
                assert required <= keys <= required | optional, f"{msg['type']} frame with fields {sorted(keys)}"
                if self.frames and self.frames[-1]["type"] == "exit" and not self.session:
                    raise AssertionError(f"{msg['type']} frame after exit")
                self.file_frames.see(msg)
                self.frames.append(msg)
                if len(self.frames) == 1:
                    if not self.first:
                        self.close()  # the token or version was rejected
                        continue
                    self.send_raw(self.first)
                elif self.on_frame is not None:
                    self.on_frame(self, msg)
        except OSError:
            pass  # a test hung up, or the runner died: the frames tell
        except BaseException as e:
            self.error = e

    def join(self) -> None:
        self._thread.join(TIMEOUT)
        if self._conn is not None:
            self._conn.close()
        self._listener.close()
        self._dir.cleanup()


class Run:
    """What one run of the runner produced."""

    def __init__(self, host: FakeHost, proc: subprocess.CompletedProcess, seconds: float, outputs: str) -> None:
        self.frames = host.frames
        self.files = host.file_frames
        self.outputs = outputs
        self.returncode = proc.returncode
        self.real_stdout = proc.stdout
        self.diag = proc.stderr.decode("utf-8", "replace")
        self.seconds = seconds

    def of_type(self, type_: str) -> list[dict]:
        return [f for f in self.frames if f.get("type") == type_]

    @property
    def hello(self) -> dict:
        return self.frames[0]

    @property
    def stdout(self) -> str:
        return "".join(f["data"] for f in self.of_type("stdout"))

    @property
    def stderr(self) -> str:
        return "".join(f["data"] for f in self.of_type("stderr"))

    @property
    def exit(self) -> dict:
        exits = self.of_type("exit")
        assert len(exits) == 1, f"expected one exit frame, got {self.frames}\ndiagnostics: {self.diag}"
        assert self.frames[-1] is exits[0], "exit is not the last frame"
        return exits[0]


def run(
    code: str | None = None,
    *,
    first: bytes | None = None,
    output_limit: int = 64 << 10,
    files: dict | None = None,
    on_frame: Callable[[FakeHost, dict], None] | None = None,
    env: dict[str, str] | None = None,
    mpl_cache: str | None = None,
) -> Run:
    """Runs code in the runner. Its outputs folder is <tmp>/outputs (the
    runner creates it: BRIDGE_OUTPUTS tells it where), its matplotlib
    cache mpl_cache if given."""
    host = FakeHost(first if first is not None else exec_frame(code, output_limit, files), on_frame, files)
    tmp = tempfile.TemporaryDirectory(prefix="bridge-runner-outputs-")
    outputs = os.path.join(tmp.name, "outputs")
    full_env = {
        "BRIDGE_RELAY_SOCKET": host.path,
        "BRIDGE_RELAY_TOKEN": TOKEN,
        "HOME": tempfile.gettempdir(),
        "LANG": "C.UTF-8",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "BRIDGE_OUTPUTS": outputs,
        **(env or {}),
    }
    if mpl_cache is None:
        argv = [sys.executable, "-I", "-B", str(RUNNER)]
    else:
        argv = [sys.executable, "-I", "-B", "-c", BOOTSTRAP, str(RUNNER.parent), mpl_cache]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            env=full_env,
            cwd=tempfile.gettempdir(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT,
        )
    finally:
        host.close()
        host.join()
        subprocess.run(["chmod", "-R", "u+rwx", tmp.name], capture_output=True)
        tmp.cleanup()
    if host.error is not None:
        raise host.error
    result = Run(host, proc, time.monotonic() - start, outputs)
    assert result.real_stdout == b"", f"runner wrote to its real stdout: {result.real_stdout!r}"
    return result


class HelloTest(unittest.TestCase):
    def test_hello_carries_token_and_version(self) -> None:
        r = run("pass")
        self.assertEqual(r.hello.keys(), {"type", "version", "token", "python"})
        self.assertEqual(r.hello["type"], "hello")
        self.assertIs(type(r.hello["version"]), int)
        self.assertEqual(r.hello["version"], VERSION)
        self.assertEqual(r.hello["token"], TOKEN)
        v = sys.version_info
        self.assertEqual(r.hello["python"], f"{v.major}.{v.minor}.{v.micro}")

    def test_clean_exit(self) -> None:
        r = run("x = 1")
        self.assertEqual(r.exit, {"type": "exit", "status": "ok", "exit_code": 0, "stdout_cut": 0, "stderr_cut": 0, "files_skipped": 0})
        self.assertEqual(r.returncode, 0)

    def test_token_not_visible_to_code(self) -> None:
        r = run("import os\nprint(os.environ.get('BRIDGE_RELAY_TOKEN'))")
        self.assertEqual(r.stdout, "None\n")


class RlimitsTest(unittest.TestCase):
    """BRIDGE_RLIMITS: limits an engine cannot set, which the runner lowers
    for itself before the code runs (a Kubernetes pod)."""

    def test_lowered_before_the_code_and_not_raisable(self) -> None:
        code = (
            "import resource\n"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE))\n"
            "try:\n"
            "    resource.setrlimit(resource.RLIMIT_NOFILE, (300, 300))\n"
            "    print('raised')\n"
            "except ValueError as e:\n"
            "    print('refused')\n"
            "import os\n"
            "print(os.environ.get('BRIDGE_RLIMITS'))"
        )
        r = run(code, env={"BRIDGE_RLIMITS": "nofile=200:250,nproc=4096:4096"})
        self.assertEqual(r.stdout, "(200, 250)\nrefused\nNone\n", r.diag)

    def test_engine_variables_dropped(self) -> None:
        # BRIDGE_ENV_DROP: what the engine injects (a pod's KUBERNETES_*)
        # is not the code's, nor its children's.
        code = "import os, subprocess\nprint(sorted(k for k in os.environ if k.startswith(('KUBERNETES', 'BRIDGE_ENV'))))\n" \
            "print(subprocess.run(['sh', '-c', 'echo ${KUBERNETES_SERVICE_HOST:-none}'], capture_output=True, text=True).stdout, end='')\nprint(os.environ['KEEP'])"
        r = run(code, env={"BRIDGE_ENV_DROP": "KUBERNETES_,OTHER_", "KUBERNETES_SERVICE_HOST": "10.96.0.1",
                           "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.1:443", "KEEP": "kept"})
        self.assertEqual(r.stdout, "[]\nnone\nkept\n", r.diag)

    def test_malformed_is_refused(self) -> None:
        # The runner dies with the variable's name before it connects: in a
        # child, so that this process's own limits stay as they are.
        for bad in ("nofile=9:8", "stack=1:1", "nofile=x:1", "nofile"):
            proc = subprocess.run(
                [sys.executable, "-I", "-B", str(RUNNER)],
                env={"BRIDGE_RELAY_SOCKET": "/nonexistent/relay.sock", "BRIDGE_RELAY_TOKEN": TOKEN, "BRIDGE_RLIMITS": bad},
                capture_output=True,
                timeout=TIMEOUT,
            )
            self.assertNotEqual(proc.returncode, 0, bad)
            self.assertIn(b"BRIDGE_RLIMITS", proc.stderr, bad)
            self.assertIn(b"malformed", proc.stderr, bad)


class OutputTest(unittest.TestCase):
    def test_print_goes_to_stdout(self) -> None:
        r = run("print('hello')\nprint('world')")
        self.assertEqual(r.stdout, "hello\nworld\n")
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.exit["status"], "ok")

    def test_mcp_tools_help_is_importable(self) -> None:
        # The run_python tool's description points the agent here. A bridge
        # without MCP servers answers every query with tools_unavailable.
        def no_tools(host: FakeHost, msg: dict) -> None:
            if msg["type"] in ("query", "tool_call"):
                host.send({"type": "tool_result", "id": msg["id"], "error": {"type": "tools_unavailable", "message": "no MCP servers"}})

        r = run("import mcp_tools\nmcp_tools.help()", on_frame=no_tools)
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        self.assertIn("bridge sandbox", r.stdout)
        self.assertIn("No network", r.stdout)
        self.assertIn("No MCP servers are connected to this bridge.", r.stdout)
        self.assertEqual([(q["op"], q["args"]) for q in r.of_type("query")], [("servers", {})])

    def test_stderr_is_separate(self) -> None:
        r = run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.stderr.write('more\\n');")
        self.assertEqual(r.stdout, "out\n")
        self.assertEqual(r.stderr, "err\nmore\n")

    def test_output_streams_while_code_runs(self) -> None:
        # The host sees the first line before the code goes on; the code
        # waits until the host has acknowledged it with a tool_result.
        seen_before_call: list[str] = []

        def on_frame(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call":
                seen_before_call.append("".join(f["data"] for f in host.frames if f["type"] == "stdout"))
                host.send({"type": "tool_result", "id": msg["id"], "result": None})

        code = "import _bridge_relay, time\nprint('early')\ntime.sleep(0.3)\n_bridge_relay.call_tool('s', 't')\nprint('late')"
        r = run(code, on_frame=on_frame)
        self.assertEqual(seen_before_call, ["early\n"])
        self.assertEqual(r.stdout, "early\nlate\n")

    def test_fd_level_writes_and_subprocesses_are_captured(self) -> None:
        code = (
            "import os, subprocess, sys\n"
            "os.write(1, b'raw out\\n')\n"
            "os.write(2, b'raw err\\n')\n"
            "subprocess.run([sys.executable, '-c', 'print(\"child out\")'], check=True)\n"
            "subprocess.run(['sh', '-c', 'echo child err >&2'], check=True);\n"
        )
        r = run(code)
        self.assertEqual(r.stdout, "raw out\nchild out\n")
        self.assertEqual(r.stderr, "raw err\nchild err\n")

    def test_multibyte_character_split_across_writes(self) -> None:
        code = (
            "import os, time\n"
            "euro = '\\u20ac'.encode()\n"
            "os.write(1, euro[:1])\n"
            "time.sleep(0.2)\n"
            "os.write(1, euro[1:2])\n"
            "time.sleep(0.2)\n"
            "os.write(1, euro[2:] + b'!\\n');\n"
        )
        r = run(code)
        self.assertEqual(r.stdout, "\u20ac!\n")

    def test_invalid_utf8_is_replaced(self) -> None:
        r = run("import os\nos.write(1, b'a\\xffb\\n');")
        self.assertEqual(r.stdout, "a\ufffdb\n")

    def test_many_small_writes_are_coalesced(self) -> None:
        code = "import os\nfor _ in range(20000):\n    os.write(1, b'x')"
        r = run(code)
        self.assertEqual(r.stdout, "x" * 20000)
        self.assertLess(len(r.of_type("stdout")), 20000)

    def test_output_beyond_limit_is_cut_and_counted(self) -> None:
        code = "import sys\nsys.stdout.write('x' * 5000)\nsys.stdout.flush()\nsys.stdout.write('y' * 3000)\nsys.stderr.write('e' * 1500);"
        r = run(code, output_limit=1024)
        self.assertEqual(r.stdout, "x" * 1024)
        self.assertEqual(r.stderr, "e" * 1024)
        self.assertEqual(r.exit["stdout_cut"], 5000 + 3000 - 1024)
        self.assertEqual(r.exit["stderr_cut"], 1500 - 1024)
        self.assertEqual(r.exit["status"], "ok")

    def test_limit_cuts_at_a_character_boundary(self) -> None:
        # 1024 is not a multiple of 3: the last character that fits ends at 1023.
        r = run("import sys\nsys.stdout.write('\\u20ac' * 1000);", output_limit=1024)
        self.assertEqual(r.stdout, "\u20ac" * 341)
        self.assertEqual(r.exit["stdout_cut"], 3000 - 1023)

    def test_cut_stream_keeps_draining(self) -> None:
        # Far more than a pipe holds: the code must not block on a full pipe.
        r = run("import os\nfor _ in range(64):\n    os.write(1, b'z' * 65536)\nprint('done', flush=True)", output_limit=1024)
        self.assertEqual(r.stdout, "z" * 1024)
        self.assertEqual(r.exit["stdout_cut"], 64 * 65536 + len("done\n") - 1024)

    def test_stdin_is_empty(self) -> None:
        r = run("try:\n    input()\nexcept EOFError:\n    print('eof')")
        self.assertEqual(r.stdout, "eof\n")


class ExecutionTest(unittest.TestCase):
    def test_top_level_await(self) -> None:
        r = run("import asyncio\nawait asyncio.sleep(0.01)\nprint('ok')")
        self.assertEqual(r.stdout, "ok\n")
        self.assertEqual(r.exit["exit_code"], 0)

    def test_namespace_is_a_fresh_main(self) -> None:
        code = (
            "import pickle, sys\n"
            "class Point:\n    pass\n"
            "print(__name__, sys.modules['__main__'].Point is Point)\n"
            "print(type(pickle.loads(pickle.dumps(Point()))).__name__)\n"
            "print('runner' in dir())\n"
        )
        r = run(code)
        self.assertEqual(r.stdout, "__main__ True\nPoint\nFalse\n")

    def test_source_is_in_linecache(self) -> None:
        code = "import inspect\ndef f():\n    return 1\nprint(inspect.getsource(f), end='')"
        r = run(code)
        self.assertEqual(r.stdout, "def f():\n    return 1\n")

    def test_line_numbers_survive_odd_line_breaks(self) -> None:
        # \f and \x1c are not line breaks to the compiler.
        r = run("x = '\f\x1c'\ny = 2\n1/0\n")
        self.assertIn('File "<code>", line 3, in <module>\n    1/0\n', r.exit["error"]["traceback"])

    def test_forked_child_does_not_speak_for_the_run(self) -> None:
        code = (
            "import os, _bridge_relay\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    try:\n"
            "        _bridge_relay.call_tool('s', 't')\n"
            "    except RuntimeError:\n"
            "        print('child: no tools', flush=True)\n"
            "else:\n"
            "    os.waitpid(pid, 0)\n"
            "    print('parent')\n"
        )
        r = run(code)
        self.assertEqual(r.stdout, "child: no tools\nparent\n")
        self.assertEqual(r.exit["exit_code"], 0)  # r.exit checks there is exactly one

    def test_lingering_threads_do_not_keep_the_run_alive(self) -> None:
        code = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\nprint('done')"
        r = run(code)
        self.assertEqual(r.stdout, "done\n")
        self.assertEqual(r.exit["exit_code"], 0)
        self.assertLess(r.seconds, 10)

    def test_background_child_holding_stdout_does_not_hang(self) -> None:
        code = "import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint('done')"
        r = run(code)
        self.assertEqual(r.stdout, "done\n")
        self.assertEqual(r.exit["exit_code"], 0)
        self.assertLess(r.seconds, 10)


class ErrorTest(unittest.TestCase):
    def assertNoRunnerFrames(self, text: str) -> None:
        self.assertNotIn("runner.py", text)
        self.assertNotIn(os.path.join("asyncio", "runners.py"), text)

    def test_exception(self) -> None:
        r = run("x = 1\nprint('before')\nraise ValueError('boom')\n")
        self.assertEqual(r.stdout, "before\n")
        e = r.exit
        self.assertEqual((e["status"], e["exit_code"]), ("error", 1))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(e["error"]["type"], "ValueError")
        self.assertEqual(e["error"]["message"], "boom")
        tb = e["error"]["traceback"]
        self.assertTrue(tb.startswith("Traceback (most recent call last):\n"), tb)
        self.assertIn('File "<code>", line 3, in <module>', tb)
        self.assertIn("raise ValueError('boom')", tb)
        self.assertTrue(tb.endswith("ValueError: boom\n"), tb)
        self.assertNoRunnerFrames(tb)
        self.assertEqual(r.stderr, tb)  # as Python would print it

    def test_exception_in_awaiting_code(self) -> None:
        code = "import asyncio\nasync def f():\n    raise KeyError('k')\nawait asyncio.sleep(0)\nawait f()\n"
        r = run(code)
        tb = r.exit["error"]["traceback"]
        self.assertEqual(r.exit["error"]["type"], "KeyError")
        self.assertIn('File "<code>", line 5, in <module>', tb)
        self.assertIn('File "<code>", line 3, in f', tb)
        self.assertNoRunnerFrames(tb)

    def test_library_frames_and_qualified_name(self) -> None:
        r = run("import json\njson.loads('{')")
        err = r.exit["error"]
        self.assertEqual(err["type"], "json.decoder.JSONDecodeError")
        self.assertIn('File "<code>", line 2', err["traceback"])
        self.assertIn(os.path.join("json", "decoder.py"), err["traceback"])
        self.assertNoRunnerFrames(err["traceback"])

    def test_exception_group(self) -> None:
        if sys.version_info < (3, 11):
            self.skipTest("TaskGroup is new in 3.11")
        code = "import asyncio\nasync def f():\n    raise ValueError('in task')\nasync with asyncio.TaskGroup() as tg:\n    tg.create_task(f())\n"
        err = run(code).exit["error"]
        self.assertEqual(err["type"], "ExceptionGroup")
        self.assertIn('File "<code>", line 3, in f', err["traceback"])
        self.assertIn("ValueError: in task", err["traceback"])
        self.assertNoRunnerFrames(err["traceback"])

    def test_chained_exception(self) -> None:
        code = "try:\n    1/0\nexcept ZeroDivisionError as e:\n    raise RuntimeError('wrapped') from e"
        tb = run(code).exit["error"]["traceback"]
        self.assertIn("ZeroDivisionError", tb)
        self.assertIn("The above exception was the direct cause", tb)
        self.assertNoRunnerFrames(tb)

    def test_syntax_error(self) -> None:
        r = run("print('never')\nx = = 1\n")
        self.assertEqual(r.stdout, "")
        e = r.exit
        self.assertEqual((e["status"], e["exit_code"]), ("error", 1))
        self.assertEqual(e["error"]["type"], "SyntaxError")
        tb = e["error"]["traceback"]
        self.assertIn('File "<code>", line 2', tb)
        self.assertIn("x = = 1", tb)
        self.assertIn("^", tb)
        self.assertNotIn("Traceback", tb)
        self.assertNoRunnerFrames(tb)
        self.assertEqual(r.stderr, tb)

    def test_sys_exit(self) -> None:
        cases = [
            ("import sys\nsys.exit(3)", 3, "error", ""),
            ("import sys\nsys.exit(0)", 0, "ok", ""),
            ("import sys\nsys.exit()", 0, "ok", ""),
            ("import sys\nsys.exit('bye')", 1, "error", "bye\n"),
            ("import asyncio, sys\nawait asyncio.sleep(0)\nsys.exit(4)", 4, "error", ""),
        ]
        for code, exit_code, status, stderr in cases:
            with self.subTest(code=code):
                r = run(code)
                self.assertEqual(r.exit["exit_code"], exit_code)
                self.assertEqual(r.exit["status"], status)
                self.assertNotIn("error", r.exit)
                self.assertEqual(r.stderr, stderr)
                self.assertEqual(r.returncode, exit_code)

    def test_keyboard_interrupt(self) -> None:
        r = run("raise KeyboardInterrupt")
        self.assertEqual(r.exit["exit_code"], 1)
        self.assertEqual(r.exit["error"]["type"], "KeyboardInterrupt")

    def test_huge_exception_message_is_clipped(self) -> None:
        r = run("raise ValueError('m' * (20 << 20))", output_limit=1024)
        err = r.exit["error"]
        self.assertLess(len(err["message"]), 100 << 10)
        self.assertLess(len(err["traceback"]), 100 << 10)
        self.assertTrue(err["message"].startswith("mmm"))
        self.assertTrue(err["traceback"].endswith("mmm\n"))


class ProtocolTest(unittest.TestCase):
    def assertRejected(self, first: bytes, code: int = 2) -> None:
        r = run(first=first)
        self.assertEqual(r.returncode, code, r.diag)
        self.assertEqual(r.of_type("exit"), [])
        self.assertIn("bridge-runner:", r.diag)
        self.assertLess(r.seconds, 10)

    def test_malformed_exec(self) -> None:
        base = {"type": "exec", "version": VERSION, "code": "print(1)", "output_limit": 1024, "files": FILES}
        cases = {
            "unknown field": frame({**base, "extra": 1}),
            "missing field": frame({k: v for k, v in base.items() if k != "output_limit"}),
            "missing files": frame({k: v for k, v in base.items() if k != "files"}),
            "files not an object": frame({**base, "files": [1, 2, 3]}),
            "files with an unknown key": frame({**base, "files": {**FILES, "max_dirs": 1}}),
            "files without a key": frame({**base, "files": {"max_files": 1, "max_bytes": 1}}),
            "negative max_files": frame({**base, "files": {**FILES, "max_files": -1}}),
            "fractional max_bytes": frame({**base, "files": {**FILES, "max_bytes": 1.5}}),
            "bool max_file_bytes": frame({**base, "files": {**FILES, "max_file_bytes": True}}),
            "null max_files": frame({**base, "files": {**FILES, "max_files": None}}),
            "version 4": frame({**base, "version": 4}),
            "wrong version": frame({**base, "version": 1}),
            "bool version": frame({**base, "version": True}),
            "code not a string": frame({**base, "code": 1}),
            "negative limit": frame({**base, "output_limit": -1}),
            "wrong type": frame({**base, "type": "hello"}),
            "not an object": frame([1, 2]),
            "not JSON": b"\x00\x00\x00\x03abc",
            "empty frame": b"\x00\x00\x00\x00",
            "frame too large": (MAX_FRAME + 1).to_bytes(4, "big"),
        }
        for name, first in cases.items():
            with self.subTest(name):
                self.assertRejected(first)

    def test_connection_closed_before_exec(self) -> None:
        self.assertRejected(b"", code=1)  # the host hangs up after hello

    def test_malformed_frame_while_running(self) -> None:
        def on_frame(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "stdout":
                host.send({"type": "tool_result", "id": 99, "result": 1})  # no such call

        r = run("import time\nprint('waiting', flush=True)\ntime.sleep(30)", on_frame=on_frame)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.of_type("exit"), [])
        self.assertIn("unknown id", r.diag)
        self.assertLess(r.seconds, 10)

    def test_host_hangs_up_mid_run(self) -> None:
        def on_frame(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "stdout":
                host.close()

        r = run("import time\nprint('waiting', flush=True)\ntime.sleep(30)", on_frame=on_frame)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.of_type("exit"), [])
        self.assertIn("the bridge closed the connection", r.diag)
        self.assertLess(r.seconds, 10)


class ToolCallTest(unittest.TestCase):
    @staticmethod
    def echo(host: FakeHost, msg: dict) -> None:
        if msg["type"] == "tool_call":
            host.send({"type": "tool_result", "id": msg["id"], "result": {"server": msg["server"], "tool": msg["tool"], "args": msg["args"]}})

    def test_round_trip(self) -> None:
        code = "import _bridge_relay\nprint(_bridge_relay.call_tool('files', 'read', {'path': 'a', 'n': [1, 2]}))"
        r = run(code, on_frame=self.echo)
        calls = r.of_type("tool_call")
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].keys(), {"type", "id", "server", "tool", "args"})
        self.assertIs(type(calls[0]["id"]), int)
        self.assertEqual((calls[0]["server"], calls[0]["tool"], calls[0]["args"]), ("files", "read", {"path": "a", "n": [1, 2]}))
        self.assertEqual(r.stdout, "{'server': 'files', 'tool': 'read', 'args': {'path': 'a', 'n': [1, 2]}}\n")
        self.assertEqual(r.exit["status"], "ok")

    def test_error_result_raises(self) -> None:
        def deny(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call":
                host.send({"type": "tool_result", "id": msg["id"], "error": {"type": "denied", "message": "not allowed"}})

        code = (
            "import _bridge_relay\n"
            "try:\n"
            "    _bridge_relay.call_tool('files', 'delete', {})\n"
            "except _bridge_relay.ToolError as e:\n"
            "    print(e.type, e.message, str(e), sep='|')\n"
            "_bridge_relay.call_tool('files', 'delete', {})\n"
        )
        r = run(code, on_frame=deny)
        self.assertEqual(r.stdout, "denied|not allowed|denied: not allowed\n")
        err = r.exit["error"]
        self.assertEqual(err["type"], "_bridge_relay.ToolError")
        self.assertEqual(err["message"], "denied: not allowed")
        self.assertIn('File "<code>", line 6', err["traceback"])

    def test_concurrent_async_calls_answered_out_of_order(self) -> None:
        held: list[dict] = []

        def reverse(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call":
                held.append(msg)
                if len(held) == 3:
                    for m in reversed(held):
                        host.send({"type": "tool_result", "id": m["id"], "result": m["args"]["n"] * 10})

        code = (
            "import asyncio, _bridge_relay\n"
            "ticks = 0\n"
            "async def tick():\n"
            "    global ticks\n"
            "    while True:\n"
            "        ticks += 1\n"
            "        await asyncio.sleep(0.01)\n"
            "t = asyncio.create_task(tick())\n"
            "print(await asyncio.gather(*(_bridge_relay.acall_tool('s', 't', {'n': n}) for n in (1, 2, 3))))\n"
            "print(ticks > 0)\n"
        )
        r = run(code, on_frame=reverse)
        self.assertEqual(r.stdout, "[10, 20, 30]\nTrue\n")
        self.assertEqual(len({m["id"] for m in held}), 3)

    def test_calls_from_threads(self) -> None:
        code = (
            "import threading, _bridge_relay\n"
            "out = {}\n"
            "def work(n):\n"
            "    out[n] = _bridge_relay.call_tool('s', 't', {'n': n})['args']['n']\n"
            "ts = [threading.Thread(target=work, args=(n,)) for n in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(sorted(out.items()) == [(n, n) for n in range(8)])\n"
        )
        r = run(code, on_frame=self.echo)
        self.assertEqual(r.stdout, "True\n")

    def test_threads_answered_in_reverse_take_turns_reading(self) -> None:
        # Eight threads wait at once; the answers come in reverse order, in
        # one write: whichever thread reads hands the others their answers,
        # and one of them reads on once it has its own.
        held: list[dict] = []

        def reverse(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call":
                held.append(msg)
                if len(held) == 8:
                    host.send_raw(b"".join(frame({"type": "tool_result", "id": m["id"], "result": m["args"]["n"]}) for m in reversed(held)))

        code = (
            "import threading, _bridge_relay\n"
            "out = {}\n"
            "def work(n):\n"
            "    out[n] = _bridge_relay.call_tool('s', 't', {'n': n})\n"
            "ts = [threading.Thread(target=work, args=(n,)) for n in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(sorted(out.items()) == [(n, n) for n in range(8)])\n"
        )
        r = run(code, on_frame=reverse)
        self.assertEqual(r.stdout, "True\n")

    def test_blocking_and_awaiting_calls_together(self) -> None:
        # A thread blocked in a call reads while the event loop awaits
        # others: every answer reaches its caller, whoever read it.
        held: list[dict] = []

        def later(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call":
                held.append(msg)
                if len(held) == 5:
                    for m in held:
                        host.send({"type": "tool_result", "id": m["id"], "result": m["args"]["n"] * 2})

        code = (
            "import asyncio, threading, _bridge_relay\n"
            "got = []\n"
            "t = threading.Thread(target=lambda: got.append(_bridge_relay.call_tool('s', 't', {'n': 100})))\n"
            "t.start()\n"
            "print(await asyncio.gather(*(_bridge_relay.acall_tool('s', 't', {'n': n}) for n in range(4))))\n"
            "t.join()\n"
            "print(got)\n"
        )
        r = run(code, on_frame=later)
        self.assertEqual(r.stdout, "[0, 2, 4, 6]\n[200]\n")

    def test_awaited_answer_is_not_held_by_a_blocked_reader(self) -> None:
        # A thread's call is never answered while the code awaits another:
        # whoever reads the socket hands the awaited answer over at once.
        def answer_async_only(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call" and msg["args"].get("wait"):
                return  # never answered: its thread stays in the call
            if msg["type"] == "tool_call":
                host.send({"type": "tool_result", "id": msg["id"], "result": msg["args"]["n"]})

        code = (
            "import asyncio, threading, time, _bridge_relay\n"
            "threading.Thread(target=_bridge_relay.call_tool, args=('s', 't', {'wait': True}), daemon=True).start()\n"
            "time.sleep(0.2)\n"
            "print(await asyncio.wait_for(_bridge_relay.acall_tool('s', 't', {'n': 7}), 5))\n"
        )
        r = run(code, on_frame=answer_async_only)
        self.assertEqual(r.stdout, "7\n", r.exit)

    # A signal handler of the code's that raises while the main thread
    # blocks in a call (the signal.alarm pattern around a slow tool): the
    # exception is the code's, the relay goes on, and a thread's call made
    # meanwhile is still answered, whoever reads.
    GIVE_UP = (
        "import signal, threading, time, _bridge_relay\n"
        "def on_alarm(*a):\n"
        "    raise {exc}('too slow')\n"
        "signal.signal(signal.SIGALRM, on_alarm)\n"
        "got = []\n"
        "def other():\n"
        "    time.sleep(0.1)\n"
        "    got.append(_bridge_relay.call_tool('s', 't', {{'n': 2}}))\n"
        "t = threading.Thread(target=other); t.start()\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.3)\n"
        "try:\n"
        "    _bridge_relay.call_tool('s', 't', {{'n': 1}})\n"
        "except {exc}:\n"
        "    print('gave up')\n"
        "t.join(5)\n"
        "print('other got', got)\n"
        "print(_bridge_relay.call_tool('s', 't', {{'n': 3}}))\n"
    )

    @staticmethod
    def slow_first(host: FakeHost, msg: dict) -> None:
        """Never answers n=1; answers n=2 after 0.5 s (after the alarm),
        and others at once."""
        if msg["type"] != "tool_call":
            return
        n = msg["args"]["n"]
        if n == 2:
            threading.Timer(0.5, lambda: host.send({"type": "tool_result", "id": msg["id"], "result": 2})).start()
        elif n != 1:
            host.send({"type": "tool_result", "id": msg["id"], "result": n})

    def test_signal_handler_exception_in_a_call_is_the_codes(self) -> None:
        for exc in ("TimeoutError", "RuntimeError"):  # an OSError, and not
            with self.subTest(exc=exc):
                r = run(self.GIVE_UP.format(exc=exc), on_frame=self.slow_first)
                self.assertEqual(r.of_type("exit")[0]["status"], "ok", r.diag)
                self.assertEqual(r.stdout, "gave up\nother got [2]\n3\n", r.diag)

    def test_results_larger_than_the_read_buffer(self) -> None:
        # 200 KiB and 5 MiB answers, sent in pieces with pauses, between
        # small ones: each arrives whole.
        def big(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "tool_call":
                data = frame({"type": "tool_result", "id": msg["id"], "result": "x" * msg["args"]["n"]})
                for i in range(0, len(data), 1 << 20):
                    host.send_raw(data[i : i + (1 << 20)])
                    time.sleep(0.01)

        code = (
            "import _bridge_relay\n"
            "for n in (3, 200 << 10, 5, 5 << 20, 7):\n"
            "    print(len(_bridge_relay.call_tool('s', 't', {'n': n})))\n"
        )
        r = run(code, on_frame=big)
        self.assertEqual(r.stdout, f"3\n{200 << 10}\n5\n{5 << 20}\n7\n")

    def test_bad_arguments_raise_in_the_code(self) -> None:
        code = (
            "import _bridge_relay\n"
            "for args in ({'x': float('nan')}, {'x': object()}, [1]):\n"
            "    try:\n"
            "        _bridge_relay.call_tool('s', 't', args)\n"
            "    except (TypeError, ValueError) as e:\n"
            "        print(type(e).__name__)\n"
        )
        r = run(code, on_frame=self.echo)
        self.assertEqual(r.stdout, "ValueError\nTypeError\nTypeError\n")
        self.assertEqual(r.of_type("tool_call"), [])


class QueryTest(unittest.TestCase):
    @staticmethod
    def answer(host: FakeHost, msg: dict) -> None:
        if msg["type"] == "query":
            host.send({"type": "tool_result", "id": msg["id"], "result": {"op": msg["op"], "args": msg["args"]}})
        elif msg["type"] == "tool_call":
            host.send({"type": "tool_result", "id": msg["id"], "result": msg["args"]})

    def test_round_trip(self) -> None:
        code = "import _bridge_relay\nprint(_bridge_relay.query('tools', {'server': 'files'}))\nprint(_bridge_relay.query('servers'))"
        r = run(code, on_frame=self.answer)
        queries = r.of_type("query")
        self.assertEqual([q.keys() for q in queries], [{"type", "id", "op", "args"}] * 2)
        self.assertEqual([(q["op"], q["args"]) for q in queries], [("tools", {"server": "files"}), ("servers", {})])
        self.assertTrue(all(type(q["id"]) is int and q["id"] > 0 for q in queries))
        self.assertEqual(r.stdout, "{'op': 'tools', 'args': {'server': 'files'}}\n{'op': 'servers', 'args': {}}\n")
        self.assertEqual(r.exit["status"], "ok")

    def test_queries_and_tool_calls_share_ids(self) -> None:
        code = (
            "import asyncio, _bridge_relay\n"
            "print(_bridge_relay.query('search', {'query': 'q', 'limit': 1})['op'])\n"
            "got = await asyncio.gather(\n"
            "    _bridge_relay.aquery('servers', {}),\n"
            "    _bridge_relay.acall_tool('s', 't', {'n': 1}),\n"
            "    _bridge_relay.aquery('tools', {'server': 's'}),\n"
            ")\n"
            "print(got)\n"
            "print(_bridge_relay.call_tool('s', 't', {'n': 2}))\n"
        )
        r = run(code, on_frame=self.answer)
        self.assertEqual(
            r.stdout,
            "search\n[{'op': 'servers', 'args': {}}, {'n': 1}, {'op': 'tools', 'args': {'server': 's'}}]\n{'n': 2}\n",
        )
        ids = [f["id"] for f in r.frames if f["type"] in ("query", "tool_call")]
        self.assertEqual(len(ids), 5)
        self.assertEqual(len(set(ids)), 5)

    def test_error_result_raises(self) -> None:
        def unknown(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "query":
                host.send({"type": "tool_result", "id": msg["id"], "error": {"type": "unknown_server", "message": "no server x"}})

        code = (
            "import _bridge_relay\n"
            "try:\n"
            "    _bridge_relay.query('tools', {'server': 'x'})\n"
            "except _bridge_relay.ToolError as e:\n"
            "    print(e.type, e.message, sep='|')\n"
        )
        r = run(code, on_frame=unknown)
        self.assertEqual(r.stdout, "unknown_server|no server x\n")

    def test_resources_through_the_relay(self) -> None:
        # mcp_tools.read_resource over the real relay: the ops go out as
        # queries, a text content comes back str and a blob bytes.
        def answer(host: FakeHost, msg: dict) -> None:
            if msg["type"] != "query":
                return
            if msg["op"] == "resources":
                result = {"resources": [{"server": "docs", "uri": "docs://a", "name": "a", "mime": "text/plain", "size": 3}], "templates": []}
            elif msg["args"]["uri"] == "docs://a":
                result = {"server": "docs", "uri": "docs://a", "contents": [{"uri": "docs://a", "mime": "text/plain", "text": True, "data": "aMOp"}]}
            else:
                result = {"server": "docs", "uri": "docs://b", "contents": [{"uri": "docs://b", "text": False, "data": "AAE="}]}
            host.send({"type": "tool_result", "id": msg["id"], "result": result})

        code = (
            "import mcp_tools\n"
            "print(mcp_tools.resources())\n"
            "print(repr(mcp_tools.read_resource('docs://a')), repr(mcp_tools.read_resource('docs://b', server='docs')))\n"
        )
        r = run(code, on_frame=answer)
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        self.assertEqual(
            r.stdout,
            "[{'server': 'docs', 'uri': 'docs://a', 'name': 'a', 'mime': 'text/plain', 'size': 3}]\n'hé' b'\\x00\\x01'\n",
        )
        self.assertEqual(
            [(q["op"], q["args"]) for q in r.of_type("query")],
            [("resources", {"server": None}), ("read_resource", {"uri": "docs://a", "server": None}), ("read_resource", {"uri": "docs://b", "server": "docs"})],
        )

    def test_bad_queries_raise_in_the_code(self) -> None:
        # An op the bridge does not know would be a protocol error that ends
        # the run: the runner refuses it before sending anything.
        code = (
            "import _bridge_relay\n"
            "for op, args in (('bogus', {}), (1, {}), ('servers', [1]), ('tools', {'x': float('nan')})):\n"
            "    try:\n"
            "        _bridge_relay.query(op, args)\n"
            "    except (TypeError, ValueError) as e:\n"
            "        print(type(e).__name__)\n"
        )
        r = run(code, on_frame=self.answer)
        self.assertEqual(r.stdout, "ValueError\nValueError\nTypeError\nValueError\n")
        self.assertEqual(r.of_type("query"), [])


OUT = "import os\nout = os.environ['BRIDGE_OUTPUTS']\n"


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers, 0 for none."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(444, None, 0, 1))


def write_files(*specs: tuple[str, bytes | int, int]) -> str:
    """Code that writes each (name, content or size, mtime in s) below out."""
    lines = [OUT]
    for name, content, mtime in specs:
        data = content if isinstance(content, bytes) else b"x" * content
        lines.append(
            f"p = os.path.join(out, {name!r})\n"
            "os.makedirs(os.path.dirname(p), exist_ok=True)\n"
            f"open(p, 'wb').write({data!r})\n"
            f"os.utime(p, ns=({mtime} * 10**9, {mtime} * 10**9))\n"
        )
    return "".join(lines)


class FilesTest(unittest.TestCase):
    """The files the code leaves in the outputs folder ("Files out" in docs/protocol.md)."""

    FILE_TYPES = {"file", "file_data", "file_end", "file_skip"}

    def file_frames(self, r: Run) -> list[dict]:
        return [f for f in r.frames if f["type"] in self.FILE_TYPES]

    def test_no_files_no_frames(self) -> None:
        r = run(OUT + "import stat\nprint(out == os.environ['BRIDGE_OUTPUTS'], oct(stat.S_IMODE(os.stat(out).st_mode)), os.listdir(out))")
        self.assertEqual(r.stdout, "True 0o700 []\n")
        self.assertEqual(self.file_frames(r), [])
        self.assertEqual(r.exit["files_skipped"], 0)

    def test_outputs_folder_is_the_runners(self) -> None:
        r = run(OUT + "print(out)")
        self.assertEqual(r.stdout, r.outputs + "\n")

    def test_files_in_mtime_order_after_the_output(self) -> None:
        code = write_files(("c.txt", b"newest", 300), ("a.txt", b"middle", 200), ("b.txt", b"oldest", 100), ("t2", b"2", 250), ("t1", b"1", 250))
        r = run(code + "print('done')")
        self.assertEqual(r.files.order, ["b.txt", "a.txt", "t1", "t2", "c.txt"])
        self.assertEqual(r.files.files["a.txt"], (b"middle", "complete"))
        self.assertEqual(r.files.files["t1"], (b"1", "complete"))
        self.assertEqual([f["id"] for f in r.of_type("file")], [1, 2, 3, 4, 5])
        types = [f["type"] for f in r.frames]
        self.assertLess(max(i for i, t in enumerate(types) if t == "stdout"), types.index("file"))
        self.assertEqual(r.exit["status"], "ok")

    def test_nested_folders(self) -> None:
        code = write_files(("top.txt", b"t", 1), ("sub/deeper/x.txt", b"x", 2), ("sub/y", b"", 3))
        r = run(code)
        self.assertEqual(r.files.order, ["top.txt", "sub/deeper/x.txt", "sub/y"])
        self.assertEqual(r.files.files["sub/y"], (b"", "complete"))
        self.assertEqual(r.of_type("file")[2]["size"], 0)
        self.assertEqual(r.of_type("file_data")[-1]["id"], 2)  # an empty file has no file_data

    def test_files_are_sent_after_an_error_too(self) -> None:
        r = run(write_files(("partial.csv", b"a,b\n", 1)) + "raise ValueError('late')")
        self.assertEqual(r.files.files, {"partial.csv": (b"a,b\n", "complete")})
        self.assertEqual(r.exit["status"], "error")

    def test_symlink_is_never_followed(self) -> None:
        code = OUT + (
            "os.symlink('/etc/passwd', os.path.join(out, 'passwd'))\n"
            "os.symlink('/etc', os.path.join(out, 'etc'))\n"
            "os.symlink('nowhere', os.path.join(out, 'dangling'))\n"
        )
        r = run(code)
        self.assertEqual(r.files.files, {})
        self.assertEqual(
            sorted((s["name"], s["size"], s["reason"]) for s in r.files.skips),
            [("dangling", 0, "symlink"), ("etc", 0, "symlink"), ("passwd", 0, "symlink")],
        )
        self.assertEqual(r.exit["files_skipped"], 0)

    def test_fifo_is_special_and_does_not_hang(self) -> None:
        # (The code can make no unix socket to leave there: test_confined.)
        code = OUT + (
            "os.mkfifo(os.path.join(out, 'pipe'))\n"
            "open(os.path.join(out, 'real'), 'w').write('r')\n"
        )
        r = run(code)
        self.assertEqual(sorted((s["name"], s["reason"]) for s in r.files.skips), [("pipe", "special")])
        self.assertEqual(r.files.files, {"real": (b"r", "complete")})
        self.assertLess(r.seconds, 10)

    def test_confined(self) -> None:
        # No unix socket of its own (so none to connect to one in a mount,
        # nor a datagram to send to one), a connected pair still; no FIFO
        # opened for writing outside /tmp and /dev where the kernel
        # has Landlock; threads and children alike.
        outside = tempfile.mkdtemp(dir="/var/tmp")
        self.addCleanup(shutil.rmtree, outside)
        os.mkfifo(os.path.join(outside, "fifo"))
        code = (
            "import errno, os, socket, threading\n"
            "def t(name, f):\n"
            "    try:\n"
            "        f()\n"
            "        print(name, 'OK')\n"
            "    except OSError as e:\n"
            "        print(name, errno.errorcode[e.errno])\n"
            "t('unix', lambda: socket.socket(socket.AF_UNIX))\n"
            "t('pair_dgram', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))\n"
            "t('pair_raw', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW))\n"
            "t('pair_seqpacket', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))\n"
            "import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def ptrace():\n"
            "    if libc.ptrace(16, os.getppid(), None, None) != 0:\n"  # PTRACE_ATTACH
            "        raise OSError(ctypes.get_errno(), 'ptrace')\n"
            "t('ptrace', ptrace)\n"
            "t('proc_write', lambda: open('/proc/self/comm', 'w').write('x'))\n"
            "t('dev_stdout', lambda: open('/dev/stdout', 'w').close())\n"
            "t('pair_stream', lambda: socket.socketpair())\n"
            "t('inet', lambda: socket.socket(socket.AF_INET).close())\n"
            "t('vsock', lambda: socket.socket(40, socket.SOCK_STREAM).close())\n"
            "def uring():\n"
            "    p = ctypes.create_string_buffer(120)\n"
            "    if libc.syscall(425, 4, p) < 0:\n"  # io_uring_setup
            "        raise OSError(ctypes.get_errno(), 'io_uring_setup')\n"
            "t('io_uring', uring)\n"
            # No namespace of its own (gVisor, which does not apply the
            # container's profile, would make one): tried in a child, with
            # one thread, as unshare(CLONE_NEWUSER) needs.
            "def sys(name, nr, *args):\n"
            "    if libc.syscall(nr, *args) < 0:\n"
            "        return name + ' ' + errno.errorcode[ctypes.get_errno()]\n"
            "    return name + ' OK'\n"
            "x86 = os.uname().machine == 'x86_64'\n"
            "r, w = os.pipe()\n"
            "if os.fork() == 0:\n"
            "    out = [sys('userns', 272 if x86 else 97, 0x10000000),\n"
            "           sys('mountns', 272 if x86 else 97, 0x20000),\n"
            "           sys('setns', 308 if x86 else 268, 0, 0),\n"
            "           sys('keyctl', 250 if x86 else 219, 0, -3, 1),\n"
            "           sys('clone_newuser', 56 if x86 else 220, 0x10000000 | 17, 0, 0, 0, 0),\n"
            "           sys('clone3', 435, 0, 0)]\n"
            "    os.write(w, '\\n'.join(out).encode())\n"
            "    os._exit(0)\n"
            "os.close(w)\n"
            "print(os.read(r, 4096).decode())\n"
            "os.wait()\n"
            f"t('fifo', lambda: os.open({os.path.join(outside, 'fifo')!r}, os.O_WRONLY | os.O_NONBLOCK))\n"
            "t('tmp', lambda: open('/tmp/bridge-confined-probe', 'w').close())\n"
            f"t('mknod_char', lambda: os.mknod({os.path.join(outside, 'null')!r}, 0o20666, os.makedev(1, 3)))\n"
            f"t('mknod_block', lambda: os.mknod({os.path.join(outside, 'sda')!r}, 0o60600, os.makedev(8, 0)))\n"
            f"t('mkfifo', lambda: os.mkfifo({os.path.join(outside, 'fifo2')!r}))\n"
            "th = threading.Thread(target=t, args=('thread_unix', lambda: socket.socket(socket.AF_UNIX)))\n"
            "th.start(); th.join()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    t('child_unix', lambda: socket.socket(socket.AF_UNIX))\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0);\n"
        )
        r = run(code)
        got = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        want = {"unix": "EPERM", "pair_dgram": "EPERM", "pair_raw": "EPERM", "pair_seqpacket": "OK", "pair_stream": "OK",
                "ptrace": "EPERM", "proc_write": "EACCES", "dev_stdout": "OK", "inet": "OK", "tmp": "OK", "vsock": "EPERM", "io_uring": "EPERM",
                "thread_unix": "EPERM", "child_unix": "EPERM", "fifo": "EACCES",
                "mknod_char": "EPERM", "mknod_block": "EPERM", "mkfifo": "OK",
                "userns": "EPERM", "mountns": "EPERM", "setns": "EPERM", "keyctl": "EPERM", "clone_newuser": "EPERM", "clone3": "ENOSYS"}
        if not landlock_abi():
            want["fifo"] = "ENXIO"  # no reader; the kernel has no Landlock to refuse it
            want["proc_write"] = "OK"
        self.assertEqual(got, want)

    def test_no_inet(self) -> None:
        # BRIDGE_NO_INET=1 (a pod, which always has a network interface):
        # no IP or packet socket either, in threads and children alike;
        # unix socket pairs still work, and the variable is not the code's.
        code = (
            "import errno, os, socket, threading\n"
            "def t(name, f):\n"
            "    try:\n"
            "        f()\n"
            "        print(name, 'OK')\n"
            "    except OSError as e:\n"
            "        print(name, errno.errorcode[e.errno])\n"
            "t('inet', lambda: socket.socket(socket.AF_INET).close())\n"
            "t('inet6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())\n"
            "t('packet', lambda: socket.socket(17, socket.SOCK_RAW).close())\n"
            "t('vsock', lambda: socket.socket(40, socket.SOCK_STREAM).close())\n"
            "t('smc', lambda: socket.socket(43, socket.SOCK_STREAM).close())\n"
            "t('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())\n"
            "t('unix', lambda: socket.socket(socket.AF_UNIX))\n"
            "t('pair_stream', lambda: socket.socketpair())\n"
            "th = threading.Thread(target=t, args=('thread_inet', lambda: socket.socket(socket.AF_INET)))\n"
            "th.start(); th.join()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    t('child_inet', lambda: socket.socket(socket.AF_INET))\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n"
            "print('env', os.environ.get('BRIDGE_NO_INET'))\n"
        )
        r = run(code, env={"BRIDGE_NO_INET": "1"})
        got = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        self.assertEqual(got, {"inet": "EPERM", "inet6": "EPERM", "packet": "EPERM", "vsock": "EPERM", "smc": "EPERM", "netlink": "OK",
                               "unix": "EPERM", "pair_stream": "OK",
                               "thread_inet": "EPERM", "child_inet": "EPERM", "env": "None"}, r.diag)

    def test_too_large(self) -> None:
        code = write_files(("big", 101, 1), ("fits", 100, 2))
        r = run(code, files={**FILES, "max_file_bytes": 100})
        self.assertEqual(r.files.skips, [{"type": "file_skip", "name": "big", "size": 101, "reason": "too_large"}])
        self.assertEqual(r.files.files, {"fits": (b"x" * 100, "complete")})

    def test_over_total(self) -> None:
        # c would pass max_bytes; d, smaller, still fits after it.
        code = write_files(("a", 100, 1), ("b", 100, 2), ("c", 100, 3), ("d", 50, 4))
        r = run(code, files={**FILES, "max_bytes": 250})
        self.assertEqual(r.files.order, ["a", "b", "c", "d"])
        self.assertEqual(sorted(r.files.files), ["a", "b", "d"])
        self.assertEqual(r.files.skips, [{"type": "file_skip", "name": "c", "size": 100, "reason": "over_total"}])

    def test_too_many(self) -> None:
        code = write_files(("1", 1, 1), ("2", 2, 2), ("3", 3, 3))
        r = run(code, files={**FILES, "max_files": 2})
        self.assertEqual(sorted(r.files.files), ["1", "2"])
        self.assertEqual(r.files.skips, [{"type": "file_skip", "name": "3", "size": 3, "reason": "too_many"}])

    def test_max_files_zero_sends_nothing(self) -> None:
        code = write_files(("a", 1, 1)) + "os.symlink('/etc/passwd', os.path.join(out, 'l'))\nprint(os.listdir(out) != [])"
        r = run(code, files={**FILES, "max_files": 0})
        self.assertEqual(r.stdout, "True\n")
        self.assertEqual(self.file_frames(r), [])
        self.assertEqual(r.exit["files_skipped"], 0)

    def test_skips_beyond_100_are_counted(self) -> None:
        code = OUT + "for n in range(150):\n    os.symlink('/etc/passwd', os.path.join(out, f'l{n:03}'))\n"
        r = run(code)
        self.assertEqual(len(r.files.skips), 100)
        self.assertEqual(r.exit["files_skipped"], 50)

    def test_large_file_goes_in_pieces_of_1_mib(self) -> None:
        code = OUT + "open(os.path.join(out, 'big.bin'), 'wb').write(bytes(range(256)) * (3 * 4096) + b'tail')"
        r = run(code, files={"max_files": 1, "max_file_bytes": 4 << 20, "max_bytes": 4 << 20})
        data, status = r.files.files["big.bin"]
        self.assertEqual(status, "complete")
        self.assertEqual(data, bytes(range(256)) * (3 * 4096) + b"tail")
        self.assertEqual(r.files.pieces, [1 << 20] * 3 + [4])

    def test_file_still_growing_when_the_code_ends(self) -> None:
        # A thread goes on appending after the code ends: the runner sends at
        # most what fstat said, and does not wait for the writer.
        code = OUT + (
            "import threading, time\n"
            "f = open(os.path.join(out, 'grow.bin'), 'wb', buffering=0)\n"
            "def grow():\n"
            "    for n in range(100000):\n"
            "        f.write(bytes([n % 251]) * 4096)\n"
            "        time.sleep(0.0005)\n"
            "threading.Thread(target=grow).start()\n"
            "time.sleep(0.3)\n"
        )
        r = run(code, files={"max_files": 1, "max_file_bytes": 400 << 20, "max_bytes": 400 << 20})
        self.assertLess(r.seconds, 10)
        [announced] = r.of_type("file")
        data, status = r.files.files["grow.bin"]
        self.assertIn(status, ("complete", "changed"))
        self.assertLessEqual(len(data), announced["size"])
        self.assertGreater(len(data), 0)
        expected = b"".join(bytes([n % 251]) * 4096 for n in range(len(data) // 4096 + 1))
        self.assertEqual(data, expected[: len(data)])

    def test_bad_names(self) -> None:
        long_dirs = "/".join("d" * 200 for _ in range(6))
        code = OUT + (
            "for name in (b'bad-\\xff.txt', b'\\xed\\xa0\\x80.txt'):\n"
            "    open(os.path.join(os.fsencode(out), name), 'wb').write(b'x')\n"
            f"os.makedirs(os.path.join(out, {long_dirs!r}))\n"
            f"open(os.path.join(out, {long_dirs!r}, 'f.txt'), 'w').write('long')\n"
            "for name in ('...', '..x', 'a\\nb', 'caf\\u00e9 \\u2603.txt', '-'):\n"
            "    open(os.path.join(out, name), 'w').write(name)\n"
        )
        r = run(code)
        self.assertEqual(sorted(r.files.files), sorted(["...", "..x", "a\nb", "caf\u00e9 \u2603.txt", "-"]))
        self.assertEqual(r.files.files["caf\u00e9 \u2603.txt"], ("caf\u00e9 \u2603.txt".encode(), "complete"))
        skips = {s["name"]: s for s in r.files.skips}
        self.assertEqual({s["reason"] for s in skips.values()}, {"bad_name"})
        self.assertIn("bad-\\xff.txt", skips)
        self.assertIn("\\xed\\xa0\\x80.txt", skips)
        self.assertEqual(skips["bad-\\xff.txt"]["size"], 1)
        long_name = (long_dirs + "/f.txt")[:256]
        self.assertIn(long_name, skips)
        self.assertEqual(skips[long_name]["size"], 4)

    def test_4_kib_name(self) -> None:
        # 16 parts of 255 bytes: past PATH_MAX from /, so made step by step.
        code = OUT + (
            "os.chdir(out)\n"
            "for _ in range(15):\n"
            "    os.mkdir('d' * 255)\n"
            "    os.chdir('d' * 255)\n"
            "open('f' * 255, 'w').write('deep')\n"
            "os.chdir('/')\n"
        )
        r = run(code)
        self.assertEqual(r.files.files, {})
        self.assertEqual(r.files.skips, [{"type": "file_skip", "name": "d" * 255 + "/", "size": 4, "reason": "bad_name"}])

    def test_walk_depth_is_bounded(self) -> None:
        ok = "/".join(["d"] * 15) + "/ok"  # 16 parts
        deep = "/".join(["d"] * 16) + "/deep"  # 17 parts: not looked at
        r = run(write_files((ok, b"1", 1), (deep, b"2", 2)))
        self.assertEqual(r.files.order, [ok])
        self.assertEqual(r.exit["files_skipped"], 0)

    def test_walk_looks_at_10000_entries(self) -> None:
        code = OUT + "for n in range(10050):\n    open(os.path.join(out, str(n)), 'w').close()\n"
        r = run(code, files={**FILES, "max_files": 20})
        self.assertEqual(len(r.files.files), 20)
        self.assertEqual(len(r.files.skips), 100)
        self.assertEqual(20 + 100 + r.exit["files_skipped"], 10000)
        self.assertEqual({s["reason"] for s in r.files.skips}, {"too_many"})

    @unittest.skipIf(os.geteuid() == 0, "root reads a file of mode 000")
    def test_unreadable(self) -> None:
        code = write_files(("secret", b"s", 1)) + "os.chmod(os.path.join(out, 'secret'), 0)"
        r = run(code)
        self.assertEqual(r.files.skips, [{"type": "file_skip", "name": "secret", "size": 1, "reason": "unreadable"}])

    def test_code_removes_or_replaces_the_folder(self) -> None:
        cases = {
            "removed": "import shutil\nshutil.rmtree(out)",
            "a symlink": "import shutil, tempfile\nshutil.rmtree(out)\nd = tempfile.mkdtemp()\nopen(d + '/x', 'w').close()\nos.symlink(d, out)",
            "a file": "import shutil\nshutil.rmtree(out)\nopen(out, 'w').write('x')",
        }
        for name, code in cases.items():
            with self.subTest(name):
                r = run(write_files(("a", b"a", 1)) + code)
                self.assertEqual(self.file_frames(r), [])
                self.assertEqual(r.exit["status"], "ok", r.stderr)

    def test_show_writes_into_the_outputs_folder(self) -> None:
        png = b"\x89PNG\r\n\x1a\n" + b"\0" * 30
        code = f"from mcp_tools import show\nprint(show({png!r}))\nprint(show({{'a': 1}}))"
        r = run(code)
        self.assertEqual(r.stdout, f"{r.outputs}/image-1.png\n{{'a': 1}}\nNone\n")
        self.assertEqual(r.files.files, {"image-1.png": (png, "complete")})

    def test_folder_that_exists_already_is_not_sent(self) -> None:
        # It may hold another run's files (in a container it never exists).
        with tempfile.TemporaryDirectory() as stale:
            Path(stale, "old.txt").write_text("old")
            r = run("print('ran')", env={"BRIDGE_OUTPUTS": stale})
        self.assertEqual(r.stdout, "ran\n")
        self.assertEqual(self.file_frames(r), [])
        self.assertIn("cannot create", r.diag)

    def test_subfolder_swapped_for_a_symlink_is_not_followed(self) -> None:
        # Mimics a swap between the walk and the open: the walk saw sub/ as a
        # folder; open_below must refuse the symlink put in its place.
        code = OUT + (
            "import shutil, tempfile\n"
            "from mcp_tools._runner_files import open_below\n"
            "os.makedirs(os.path.join(out, 'sub'))\n"
            "d = tempfile.mkdtemp()\n"
            "open(os.path.join(d, 'f'), 'w').write('outside')\n"
            "os.rmdir(os.path.join(out, 'sub'))\n"
            "os.symlink(d, os.path.join(out, 'sub'))\n"
            "root = os.open(out, os.O_RDONLY | os.O_DIRECTORY)\n"
            "try:\n"
            "    open_below(root, (b'sub', b'f'))\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)\n"
            "shutil.rmtree(d)\n"
            "os.unlink(os.path.join(out, 'sub'))\n"
        )
        r = run(code)
        self.assertIn(r.stdout, ("NotADirectoryError\n", "OSError\n"), r.stderr)


def runner_files() -> Any:
    """lib/mcp_tools/_runner_files.py, loaded by its path as the runner does."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bridge_runner_files", RUNNER.with_name("lib") / "mcp_tools" / "_runner_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Enough of matplotlib and pandas, as packages the code puts on its path, for
# the runner's notebook habits; a figure saves a PNG that names it.
FAKE_LIBS = {
    "matplotlib/__init__.py": "",
    "matplotlib/figure.py": (
        "class Figure:\n"
        "    def __init__(self, num):\n"
        "        self.number = num\n"
        "        self.stale = True\n"
        "    def savefig(self, path, format=None):\n"
        "        with open(path, 'wb') as f:\n"
        "            f.write(b'\\x89PNG\\r\\n\\x1a\\n' + f'figure {self.number}'.encode())\n"
        "        self.stale = False\n"
    ),
    "matplotlib/axes.py": "class Axes:\n    def __init__(self, figure):\n        self.figure = figure\n",
    "matplotlib/lines.py": "class Line2D:\n    def __init__(self, axes):\n        self.axes = axes\n        self.figure = axes.figure\n",
    "matplotlib/pyplot.py": (
        "from matplotlib.figure import Figure\n"
        "from matplotlib.axes import Axes\n"
        "from matplotlib.lines import Line2D\n"
        "_figs = {}\n"
        "_current = []\n"
        "def figure(num=None):\n"
        "    if num is None:\n"
        "        num = max(_figs, default=0) + 1\n"
        "    fig = _figs.setdefault(num, Figure(num))\n"
        "    _current[:] = [fig]\n"
        "    return fig\n"
        "def gcf():\n"
        "    return _current[0] if _current and _current[0].number in _figs else figure()\n"
        "def get_fignums():\n"
        "    return sorted(_figs)\n"
        "def close(fig=None):\n"
        "    _figs.pop(fig.number, None)\n"
        "def plot(*args):\n"
        "    fig = gcf()\n"
        "    fig.stale = True\n"
        "    return [Line2D(Axes(fig))]\n"
        "def subplots():\n"
        "    fig = figure()\n"
        "    return fig, Axes(fig)\n"
        "def show(*args, **kwargs):\n"
        "    print('the backend would show, here nothing')\n"
    ),
    "pandas/__init__.py": (
        "class _Iloc:\n"
        "    def __init__(self, rows):\n"
        "        self.rows = rows\n"
        "    def __getitem__(self, key):\n"
        "        return self.rows[key[0]][key[1]]\n"
        "class DataFrame:\n"
        "    def __init__(self, columns):\n"
        "        self.columns = list(columns)\n"
        "        self._rows = list(zip(*columns.values()))\n"
        "        self.shape = (len(self._rows), len(self.columns))\n"
        "        self.index = list(range(len(self._rows)))\n"
        "        self.iloc = _Iloc(self._rows)\n"
    ),
}


class NotebookTest(unittest.TestCase):
    """Jupyter's habits: the last expression's value, display(), plt.show()
    and the figures left open (docs/sandbox-api.md, "Notebook habits")."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="bridge-runner-fakes-")
        self.addCleanup(tmp.cleanup)
        os.chmod(tmp.name, 0o755)
        for name, text in FAKE_LIBS.items():
            path = os.path.join(tmp.name, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        self.fakes = f"import sys\nsys.path.insert(0, {tmp.name!r})\n"

    def pngs(self, r: Run) -> dict[str, bytes]:
        return {name: data for name, (data, status) in r.files.files.items() if data.startswith(b"\x89PNG")}

    def test_last_expression_shows_its_repr(self) -> None:
        cases = [
            ("x = 41\nx + 1", "42\n"),
            ("'text'", "'text'\n"),
            ("[1, 'a']", "[1, 'a']\n"),
            ("None", ""),
            ("print('once')", "once\n"),
            ("x = 1\nx + 1;", ""),
            ("x = 1\nx + 1 ;  # hidden", ""),
            ("x = 1\nx + 1  # a comment; not hidden", "2\n"),
            ("x = 1; x", "1\n"),
            ("if True:\n    5", ""),
            ("x = 5", ""),
            ("import os", ""),
            ("def f():\n    return 3\nf()", "3\n"),
            ("d = {'a': 1}\nd", "{'a': 1}\n"),
            ("(1 +\n 2)", "3\n"),
            ("sum([\n1,\n2])", "3\n"),
            ("1 + \\\n2", "3\n"),
            ('"""\nimport os\n"""', "'\\nimport os\\n'\n"),
            ("class A:\n    def __repr__(self):\n        return 'an A'\nA()", "an A\n"),
            ("import asyncio\nawait asyncio.sleep(0, result=7)", "7\n"),
            ("import asyncio\nx = await asyncio.sleep(0, result=7)\nx * 2", "14\n"),
            ("print = lambda *a: 'shadowed'\nprint(1)", "'shadowed'\n"),
        ]
        for code, want in cases:
            with self.subTest(code=code):
                r = run(code)
                self.assertEqual(r.exit["status"], "ok", r.stderr)
                self.assertEqual(r.stdout, want)

    def test_last_expression_that_raises(self) -> None:
        r = run("x = 1\n\n1 / 0")
        self.assertEqual(r.exit["error"]["type"], "ZeroDivisionError")
        self.assertEqual(r.stdout, "")
        self.assertIn('File "<code>", line 3, in <module>\n    1 / 0\n', r.stderr)
        self.assertNotIn("displayhook", r.stderr)
        r = run("import asyncio\nasync def f():\n    raise KeyError('k')\nawait f()")
        self.assertEqual(r.exit["error"]["type"], "KeyError")
        self.assertIn('File "<code>", line 4, in <module>', r.stderr)
        self.assertIn('File "<code>", line 3, in f', r.stderr)

    def test_syntax_errors_are_reported_as_before(self) -> None:
        for code, line in (("x = 1\n(1 +", 2), ("x = 1\nreturn 5", 2), ("x = (1,\n", 1), ("x = 1\nf(x for x in y, 1)", 2)):
            with self.subTest(code=code):
                r = run(code)
                self.assertEqual(r.exit["error"]["type"], "SyntaxError", r.stderr)
                self.assertIn(f'File "<code>", line {line}', r.stderr)
                self.assertNotIn("Traceback", r.stderr)

    def test_each_call_of_a_session_shows_its_last_value(self) -> None:
        r = SessionTest.session(self, ["x = 41\nx", "x + 1", "x;", "display(x, 'y')"])
        self.assertEqual([e["status"] for e in r.of_type("exit")], ["ok"] * 4, r.diag)
        self.assertEqual(r.stdout, "41\n42\n41\n'y'\n")

    def test_display_and_the_ipython_stand_in(self) -> None:
        r = run("display(1, 'a', None)\nfrom IPython.display import display as d\nd([2])\nimport IPython\nprint('_fallback' in IPython.__file__)")
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        import importlib.util

        # The stand-in only where there is no real IPython.
        self.assertEqual(r.stdout, f"1\n'a'\nNone\n[2]\n{importlib.util.find_spec('IPython') is None}\n")

    def test_dataframe_as_a_table(self) -> None:
        r = run(self.fakes + "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndisplay(df)\ndf")
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        table = "|  | a | b |\n| --- | ---: | --- |\n| 0 | 1 | x |\n| 1 | 2 | y |\n"
        self.assertEqual(r.stdout, table + table)

    def test_plt_show_sends_the_open_figures_and_closes_them(self) -> None:
        code = self.fakes + (
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2])\n"
            "plt.figure()\n"
            "plt.plot([3])\n"
            "plt.show()\n"
            "print(plt.get_fignums(), plt.show.__module__)\n"
        )
        r = run(code)
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        self.assertEqual(r.stdout, "[] matplotlib.pyplot\n")
        self.assertEqual(self.pngs(r), {"figure-1.png": b"\x89PNG\r\n\x1a\nfigure 1", "figure-2.png": b"\x89PNG\r\n\x1a\nfigure 2"})

    def test_figures_left_open_come_back(self) -> None:
        code = self.fakes + "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nplt.plot([1])\nprint('drawn')\n"
        r = run(code)
        self.assertEqual(r.stdout, "drawn\n")
        self.assertEqual(list(self.pngs(r)), ["figure-1.png"])
        # Also after an error, as Jupyter's inline backend does.
        r = run(code + "1 / 0\n")
        self.assertEqual(r.exit["error"]["type"], "ZeroDivisionError")
        self.assertEqual(list(self.pngs(r)), ["figure-1.png"])
        # Not after an interrupt: a session's timeout leaves the runner only
        # the interrupt grace to answer, so they are closed unsaved.
        r = run(code + "raise KeyboardInterrupt\n")
        self.assertEqual(r.exit["error"]["type"], "KeyboardInterrupt")
        self.assertEqual(list(self.pngs(r)), [])

    def test_a_script_runs_as_python_would(self) -> None:
        # bridge run FILE: no last value shown, no figure left open sent;
        # plt.show() still saves (a script has no screen to show it on).
        r = run(first=exec_frame("x = 41\nx + 1", script=True))
        self.assertEqual((r.exit["status"], r.stdout), ("ok", ""), r.stderr)
        code = self.fakes + "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nplt.plot([1])\nfig\n"
        r = run(first=exec_frame(code, script=True))
        self.assertEqual((r.exit["status"], r.stdout, list(self.pngs(r))), ("ok", "", []), r.stderr)
        r = run(first=exec_frame(code + "plt.show()\n", script=True))
        self.assertEqual(list(self.pngs(r)), ["figure-1.png"])
        msg = {"type": "exec", "version": VERSION, "code": "pass", "output_limit": 10, "files": FILES, "script": "yes"}
        r = run(first=frame(msg))
        self.assertEqual(r.returncode, 2, r.diag)
        self.assertIn("exec.script is not a boolean", r.diag)

    def test_a_figure_as_the_last_value_comes_back_once(self) -> None:
        for last in ("plt.plot([1])", "ax", "fig"):
            with self.subTest(last=last):
                r = run(self.fakes + "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n" + last)
                self.assertEqual(r.exit["status"], "ok", r.stderr)
                self.assertEqual(r.stdout, "")
                self.assertEqual(list(self.pngs(r)), ["figure-1.png"])

    def test_shown_figure_is_not_sent_again_unless_changed(self) -> None:
        base = self.fakes + "import matplotlib.pyplot as plt\nfrom mcp_tools import show\nfig, ax = plt.subplots()\nshow(fig, name='chart')\n"
        r = run(base)
        self.assertEqual(list(self.pngs(r)), ["chart.png"])
        r = run(base + "plt.plot([2])\n")  # changed since: sent again
        self.assertEqual(sorted(self.pngs(r)), ["chart.png", "figure-1.png"])

    def test_session_figures_come_back_with_each_call(self) -> None:
        first = self.fakes + "import matplotlib.pyplot as plt\nplt.plot([1])\n"
        r = SessionTest.session(self, [first, "plt.plot([2])", "print(plt.get_fignums())"])
        self.assertEqual([e["status"] for e in r.of_type("exit")], ["ok"] * 3, r.diag)
        self.assertEqual(r.stdout, "[]\n")
        self.assertEqual(sorted(self.pngs(r)), ["figure-1.png", "figure-2.png"])

    def test_no_matplotlib_without_the_code_importing_it(self) -> None:
        r = run("import sys\nx = [1]\nx\ndisplay(x)\nprint(sorted(m for m in ('matplotlib', 'pandas', 'mcp_tools', 'ast') if m in sys.modules))")
        self.assertEqual(r.stdout, "[1]\n[]\n")

    def test_real_matplotlib_and_pandas(self) -> None:
        # In the datascience image (integration/notebook_test.go runs them there too).
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None or importlib.util.find_spec("pandas") is None:
            self.skipTest("matplotlib and pandas are not installed")
        code = (
            "from IPython.display import display\n"  # matplotlib then asks IPython.get_ipython()
            "import matplotlib\n"
            "matplotlib.use('Agg')\n"
            "import matplotlib.pyplot as plt\n"
            "import pandas as pd\n"
            "from mcp_tools import show\n"
            "df = pd.DataFrame({'x': [1, 2], 'y': [3.5, 4.0]})\n"
            "df.plot(x='x', y='y')\n"
            "plt.show()\n"
            "fig, ax = plt.subplots()\n"
            "ax.plot([1, 2])\n"
            "show(fig, name='kept')\n"  # shown, unchanged: not sent again at the end
            "plt.figure()\n"
            "plt.plot([3, 1])\n"  # left open: comes back
            "df\n"
        )
        mpl = tempfile.TemporaryDirectory(prefix="bridge-mpl-")
        self.addCleanup(mpl.cleanup)
        r = run(code, env={"MPLCONFIGDIR": mpl.name})
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        self.assertEqual(r.stdout, "|  | x | y |\n| --- | ---: | ---: |\n| 0 | 1 | 3.5 |\n| 1 | 2 | 4.0 |\n")
        self.assertEqual(sorted(self.pngs(r)), ["figure-1.png", "figure-2.png", "kept.png"])

    def test_ipython_stand_in(self) -> None:
        fallback = RUNNER.parent / "lib" / "_fallback"
        r = run(f"import sys\nsys.path.insert(0, {str(fallback)!r})\nfrom IPython.display import display\nimport IPython\n"
                "import builtins\nprint(IPython.__doc__.split(':')[0], display is builtins.display, IPython.get_ipython())\ndisplay('x')")
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        self.assertEqual(r.stdout, "Not IPython True None\n'x'\n")

    def test_may_show_last_is_never_wrong(self) -> None:
        # False only where the last statement is no expression showing a value.
        sys.path.insert(0, str(RUNNER.parent / "lib"))
        try:
            import _bridge_notebook
        finally:
            del sys.path[0]
        import ast
        import io

        snippets = [
            "x = 1", "x = (1,\n2)", "f(\nx=1)", "import os", "from os import path", "def f(): pass", "print(1)",
            "print(1) or 5", "print(1)\n# done", "print('a;b')", "foo(\nprint(1))", "a \\\nif b else c", "x == 1",
            "x <= 1", "x >>= 1", "lambda x=1: x", "x: int = 1", "@dec\ndef f(): pass", "for i in x: i", "x = 1; y",
            '"""\nimport os\n# end"""', "f(\nx=\"(\")", "print(f'{x}')", "print(x, end='')", "d['a'] = (1)",
            "if x: y", "x.y = z", "type(x)", "await f()", "async def f(): pass", "[x\nfor x in y]", "x = 1\n\n   \n",
            "print('x')\nprint = 3", "def print(x):\n    return x\nprint(1)",
        ]
        for code in snippets:
            with self.subTest(code=code):
                lines = io.StringIO(code, newline=None).readlines()
                body = ast.parse(code).body if not code.startswith("await") else ast.parse("(" + code + ")").body
                shows = bool(body) and isinstance(body[-1], ast.Expr) and not (
                    isinstance(body[-1].value, ast.Call) and getattr(body[-1].value.func, "id", "") == "print" and "print =" not in code and "def print" not in code
                )
                if shows:
                    self.assertTrue(_bridge_notebook.may_show_last(lines, code, {}), "skipped an expression")


def put_frames(files: dict[str, bytes], piece: int = 1 << 20) -> bytes:
    """The put, put_data and put_end frames of files, path → bytes."""
    out = b""
    for i, (path, data) in enumerate(files.items(), 1):
        out += frame({"type": "put", "id": i, "path": path, "size": len(data)})
        for at in range(0, len(data), piece):
            out += frame({"type": "put_data", "id": i, "data": base64.b64encode(data[at : at + piece]).decode()})
        out += frame({"type": "put_end", "id": i})
    return out


def with_inputs(files: dict[str, bytes], code: str, session: bool = False, announced: int | None = None) -> bytes:
    """An exec of code preceded by the puts of files."""
    msg = json.loads(exec_frame(code, session=session)[4:])
    msg["inputs"] = len(files) if announced is None else announced
    return put_frames(files) + frame(msg)


class InputsTest(unittest.TestCase):
    """Files in: put frames before exec land read-only in the inputs folder."""

    def run_inputs(self, first: bytes, code: str = "", **kw: Any) -> Run:
        tmp = tempfile.mkdtemp(prefix="bridge-runner-inputs-")
        self.addCleanup(lambda: (subprocess.run(["chmod", "-R", "u+rwx", tmp]), shutil.rmtree(tmp, ignore_errors=True)))
        self.inputs = os.path.join(tmp, "inputs")
        return run(first=first, env={"BRIDGE_INPUTS": self.inputs, **kw.pop("env", {})}, **kw)

    def test_files_land_read_only(self) -> None:
        big = bytes(range(256)) * 9000  # over one 1 MiB piece: several put_data
        code = (
            "import os, stat\nroot = os.environ['BRIDGE_INPUTS']\n"
            "print(open(os.path.join(root, 'a.txt')).read())\n"
            "print(len(open(os.path.join(root, 'd/e/big.bin'), 'rb').read()))\n"
            "print(oct(stat.S_IMODE(os.stat(os.path.join(root, 'a.txt')).st_mode)), oct(stat.S_IMODE(os.stat(os.path.join(root, 'd')).st_mode)))\n"
            "try:\n    open(os.path.join(root, 'a.txt'), 'w')\nexcept PermissionError:\n    print('refused')\n"
        )
        r = self.run_inputs(with_inputs({"a.txt": b"hello", "d/e/big.bin": big, "empty": b""}, code))
        self.assertEqual(r.exit["status"], "ok", r.diag + r.stderr)
        # root writes whatever the mode says; the sandbox's uid does not.
        refused = "" if os.geteuid() == 0 else "refused\n"
        self.assertEqual(r.stdout, f"hello\n{len(big)}\n0o444 0o555\n{refused}")

    def test_unwritable_input_fails_the_run_not_the_runner(self) -> None:
        # A file where the inputs folder should be: the code does not run,
        # and the exit says which input and why.
        tmp = tempfile.mkdtemp(prefix="bridge-runner-inputs-")
        self.addCleanup(shutil.rmtree, tmp, True)
        blocker = os.path.join(tmp, "inputs")
        with open(blocker, "w") as f:
            f.write("x")
        r = run(first=with_inputs({"a.txt": b"hello", "b.txt": b"more"}, "print('ran')"), env={"BRIDGE_INPUTS": blocker})
        self.assertEqual(r.exit["status"], "error")
        self.assertEqual(r.exit["error"]["type"], "InputError")
        self.assertIn("a.txt could not be written", r.exit["error"]["message"])
        self.assertEqual(r.stdout, "")

    def test_protocol_errors(self) -> None:
        cases = {
            "wrong count": with_inputs({"a": b"x"}, "print(1)", announced=2),
            "escaping path": put_frames({"../a": b"x"}) + exec_frame("print(1)"),
            "absolute path": put_frames({"/etc/a": b"x"}) + exec_frame("print(1)"),
            "data past size": frame({"type": "put", "id": 1, "path": "a", "size": 1})
            + frame({"type": "put_data", "id": 1, "data": base64.b64encode(b"xy").decode()}),
            "end before size": frame({"type": "put", "id": 1, "path": "a", "size": 2}) + frame({"type": "put_end", "id": 1}),
            "extra key": frame({"type": "put", "id": 1, "path": "a", "size": 0, "mode": 7}),
        }
        for name, first in cases.items():
            with self.subTest(name):
                r = self.run_inputs(first)
                self.assertEqual(r.returncode, 2, r.diag)
                self.assertIn("relay protocol error", r.diag)
                self.assertEqual(r.of_type("exit"), [])

    def test_session_inputs_between_calls(self) -> None:
        # A later call's inputs: a new file, and one of an earlier call's
        # paths replaced; a symbolic link the code left is not followed.
        calls = iter([
            with_inputs({"a.txt": b"two", "n/b.txt": b"new"}, "print(open(root + '/a.txt').read(), open(root + '/n/b.txt').read())", session=True),
            with_inputs({"link/x": b"evil"}, "print('ran')", session=True),
        ])

        def on_frame(host: FakeHost, msg: dict) -> None:
            host.session = True
            if msg["type"] == "exit":
                nxt = next(calls, None)
                if nxt is None:
                    host.close()
                else:
                    host.send_raw(nxt)

        first = with_inputs({"a.txt": b"one"}, "import os\nroot = os.environ['BRIDGE_INPUTS']\nos.chmod(root, 0o755)\nos.symlink('/tmp', root + '/link')\nprint(open(root + '/a.txt').read())", session=True)
        r = self.run_inputs(first, on_frame=on_frame)
        exits = r.of_type("exit")
        self.assertEqual([e["status"] for e in exits], ["ok", "ok", "error"], r.diag + r.stderr)
        self.assertEqual(r.stdout, "one\ntwo new\n")
        self.assertEqual(exits[2]["error"]["type"], "InputError")
        self.assertIn("taken by something else", exits[2]["error"]["message"])


class InputsFollowNoLinkTest(unittest.TestCase):
    """A folder of an input path that is a link fails the write even where
    the kernel follows the link despite O_NOFOLLOW (gVisor's, with
    O_DIRECTORY): the folder opened must be the entry its parent holds."""

    def test_link_followed_by_the_kernel_is_refused(self) -> None:
        import errno
        import importlib.util
        import unittest.mock

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "mcp_tools", "_runner_inputs.py")
        spec = importlib.util.spec_from_file_location("_runner_inputs_under_test", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        base = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, base)
        root, elsewhere = os.path.join(base, "inputs"), os.path.join(base, "elsewhere")
        os.mkdir(root)
        os.mkdir(elsewhere)
        os.symlink(elsewhere, os.path.join(root, "link"))
        real_open = os.open

        def follows(name: str, flags: int, *args: object, **kw: object) -> int:
            return real_open(name, flags & ~os.O_NOFOLLOW, *args, **kw)  # type: ignore[arg-type]

        with unittest.mock.patch.object(mod.os, "open", follows):
            with self.assertRaises(OSError) as cm:
                mod.Inputs(root)._create("link/x")
        self.assertEqual(cm.exception.errno, errno.ELOOP)
        self.assertEqual(os.listdir(elsewhere), [])


class SnapshotTest(unittest.TestCase):
    """pack sends a session's /tmp as one tar file; a put with archive: true
    before a new session's first exec unpacks one."""

    def tmp(self) -> str:
        d = tempfile.mkdtemp(prefix="bridge-runner-tmp-")
        self.addCleanup(lambda: (subprocess.run(["chmod", "-R", "u+rwx", d]), shutil.rmtree(d, ignore_errors=True)))
        return d

    def pack_session(self, code: str, max_bytes: int) -> tuple[Run, bytes]:
        """Runs code in a session, then asks for a pack: returns the run and
        the tar's bytes."""
        tmp = self.tmp()
        got = bytearray()
        packed = []

        def on_frame(host: FakeHost, msg: dict) -> None:
            host.session = True
            if msg["type"] == "exit":
                host.send({"type": "pack", "max_bytes": max_bytes})
            elif msg["type"] == "file_data":
                got.extend(base64.b64decode(msg["data"]))
            elif msg["type"] in ("file_end", "file_skip"):
                packed.append(msg)
                host.close()

        # The host checks the pack's file against the exec's file limits.
        big = {"max_files": 20, "max_file_bytes": 64 << 20, "max_bytes": 64 << 20}
        r = run(first=exec_frame(code, session=True, files=big), files=big, on_frame=on_frame, env={"BRIDGE_TMP": tmp})
        self.assertEqual(len(packed), 1, r.diag)
        return r, bytes(got)

    def test_pack_and_unpack(self) -> None:
        code = (
            "import os\nt = os.environ['BRIDGE_TMP']\n"
            "os.makedirs(t + '/work/deep', exist_ok=True)\n"
            "open(t + '/work/deep/data.bin', 'wb').write(bytes(range(256)) * 5000)\n"
            "open(t + '/work/empty', 'w').close()\n"
            "os.symlink('deep/data.bin', t + '/work/link')\n"
            "os.mkfifo(t + '/work/fifo')\n"
            "os.chmod(t + '/work/deep/data.bin', 0o640)\n"
        )
        r, tar = self.pack_session(code, 64 << 20)
        self.assertEqual([e["status"] for e in r.of_type("exit")], ["ok"], r.diag)
        file = [f for f in r.frames if f["type"] == "file"][0]
        self.assertEqual((file["name"], file["size"]), ("tmp.tar", len(tar)))
        import io
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            names = {m.name: m for m in tf.getmembers()}
        self.assertIn("work/deep/data.bin", names)
        self.assertEqual(names["work/deep/data.bin"].size, 256 * 5000)
        self.assertEqual(names["work/link"].linkname, "deep/data.bin")
        self.assertNotIn("work/fifo", names)  # not packed
        # Restored into a new session's /tmp before its first exec.
        tmp2 = self.tmp()
        check = (
            "import os, stat\nt = os.environ['BRIDGE_TMP']\n"
            "d = open(t + '/work/deep/data.bin', 'rb').read()\n"
            "print(len(d), d[:3] == bytes([0, 1, 2]), oct(stat.S_IMODE(os.stat(t + '/work/deep/data.bin').st_mode)), os.readlink(t + '/work/link'), os.path.getsize(t + '/work/empty'))\n"
        )
        msg = json.loads(exec_frame(check, session=True)[4:])
        msg["inputs"] = 1
        first = frame({"type": "put", "id": 1, "path": "tmp.tar", "size": len(tar), "archive": True})
        for at in range(0, len(tar), 1 << 20):
            first += frame({"type": "put_data", "id": 1, "data": base64.b64encode(tar[at : at + (1 << 20)]).decode()})
        first += frame({"type": "put_end", "id": 1}) + frame(msg)

        def hang_up(host: FakeHost, m: dict) -> None:
            host.session = True
            if m["type"] == "exit":
                host.close()

        r2 = run(first=first, on_frame=hang_up, env={"BRIDGE_TMP": tmp2, "BRIDGE_INPUTS": tmp2 + "/inputs"})
        self.assertEqual(r2.exit["status"], "ok", r2.diag + r2.stderr)
        self.assertEqual(r2.stdout, "1280000 True 0o640 deep/data.bin 0\n")

    def test_pack_over_the_bound_is_skipped(self) -> None:
        r, tar = self.pack_session("import os\nopen(os.environ['BRIDGE_TMP'] + '/big', 'wb').write(b'x' * 100000)", 50000)
        skips = r.of_type("file_skip")
        self.assertEqual(tar, b"")
        self.assertEqual(len(skips), 1, r.frames)
        self.assertEqual((skips[0]["name"], skips[0]["reason"]), ("tmp.tar", "too_large"))
        self.assertGreater(skips[0]["size"], 100000)

    def test_archive_escaping_tmp_fails_the_restore(self) -> None:
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            ti = tarfile.TarInfo("../escaped")
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
        tar = buf.getvalue()
        tmp = self.tmp()
        msg = json.loads(exec_frame("print('ran')", session=True)[4:])
        msg["inputs"] = 1
        first = frame({"type": "put", "id": 1, "path": "tmp.tar", "size": len(tar), "archive": True})
        first += frame({"type": "put_data", "id": 1, "data": base64.b64encode(tar).decode()}) + frame({"type": "put_end", "id": 1}) + frame(msg)

        def hang_up(host: FakeHost, m: dict) -> None:
            host.session = True
            if m["type"] == "exit":
                host.close()

        r = run(first=first, on_frame=hang_up, env={"BRIDGE_TMP": tmp + "/t", "BRIDGE_INPUTS": tmp + "/t/inputs"})
        self.assertEqual(r.exit["error"]["type"], "InputError", r.diag)
        self.assertIn("leaves /tmp", r.exit["error"]["message"])
        self.assertFalse(os.path.exists(os.path.join(tmp, "escaped")))
        self.assertEqual(r.stdout, "")


class SessionTest(unittest.TestCase):
    """exec with session: one interpreter across calls (docs/protocol.md)."""

    def session(self, codes: list[str], interrupt_after: dict[int, float] | None = None, idle_interrupt: bool = False, gap: float = 0) -> Run:
        """Runs codes as one session's calls, gap seconds apart, then hangs
        up. interrupt_after maps a call's index to seconds after its exec
        when to interrupt it."""
        interrupt_after = interrupt_after or {}
        calls = iter(codes[1:])
        timers: list[threading.Timer] = []

        def on_frame(host: FakeHost, msg: dict) -> None:
            host.session = True
            if msg["type"] != "exit":
                return
            if idle_interrupt:
                host.send({"type": "interrupt"})
            nxt = next(calls, None)
            if nxt is None:
                host.close()
                return
            index = len(host.frames and [f for f in host.frames if f["type"] == "exit"])
            if gap:
                time.sleep(gap)  # on the host's reader thread: nothing else to read meanwhile
            host.send_raw(exec_frame(nxt, session=True))
            if index in interrupt_after:
                t = threading.Timer(interrupt_after[index], lambda: host.send({"type": "interrupt"}))
                timers.append(t)
                t.start()

        r = run(first=exec_frame(codes[0], session=True), on_frame=on_frame)
        for t in timers:
            t.join()
        return r

    def test_state_persists(self) -> None:
        r = self.session(["x = 41\nimport json", "print(json.dumps(x + 1))"])
        exits = r.of_type("exit")
        self.assertEqual([e["status"] for e in exits], ["ok", "ok"], r.diag)
        self.assertEqual(r.stdout, "42\n")
        self.assertEqual(r.returncode, 0, r.diag)  # the host hung up between calls

    def test_calls_do_not_leak_descriptors(self) -> None:
        calls = ["import os\nfds = [len(os.listdir('/proc/self/fd'))]"]
        calls += ["print(1)\nfds.append(len(os.listdir('/proc/self/fd')))"] * 30
        calls += ["print(fds[1], fds[-1])"]
        r = self.session(calls)
        self.assertTrue(all(e["status"] == "ok" for e in r.of_type("exit")), r.diag)
        first, last = r.stdout.splitlines()[-1].split()
        self.assertEqual(first, last, "descriptors grew over 30 calls")

    def test_interrupt_keeps_the_interpreter(self) -> None:
        r = self.session(["x = 1", "import time\nx = 2\ntime.sleep(30)", "print(x)"], interrupt_after={1: 0.3})
        exits = r.of_type("exit")
        self.assertEqual([e["status"] for e in exits], ["ok", "error", "ok"], r.diag)
        self.assertEqual(exits[1]["error"]["type"], "KeyboardInterrupt")
        self.assertEqual(r.stdout, "2\n")
        self.assertLess(r.seconds, 10)

    def test_interrupt_never_tears_a_frame(self) -> None:
        # The host stops reading while a big tool call is being sent, and
        # interrupts meanwhile: the frame still arrives whole, and the code
        # gets its KeyboardInterrupt after it.
        code = """import _bridge_relay
print("go", flush=True)
try:
    _bridge_relay.call_tool("s", "t", {"x": "a" * (8 << 20)})
except KeyboardInterrupt:
    print("interrupted")
"""

        def on_frame(host: FakeHost, msg: dict) -> None:
            host.session = True
            if msg["type"] == "stdout" and "go" in msg["data"]:
                threading.Timer(0.2, lambda: host.send({"type": "interrupt"})).start()
                time.sleep(0.6)  # not reading: the runner's sendall blocks
            elif msg["type"] == "exit":
                host.close()

        r = run(first=exec_frame(code, session=True), on_frame=on_frame)
        calls = r.of_type("tool_call")
        self.assertEqual(len(calls), 1, r.diag)
        self.assertEqual(len(calls[0]["args"]["x"]), 8 << 20)
        self.assertIn("interrupted", r.stdout, r.diag)

    def test_interrupt_in_a_tool_call_keeps_the_session(self) -> None:
        # The call's tool never answers (or answers after the interrupt):
        # the code gets its KeyboardInterrupt, and the next exec is read.
        for late in (False, True):
            with self.subTest(answer_after_interrupt=late):
                execs = []

                def on_frame(host: FakeHost, msg: dict) -> None:
                    host.session = True
                    if msg["type"] == "tool_call":
                        threading.Timer(0.2, lambda: host.send({"type": "interrupt"})).start()
                        if late:
                            threading.Timer(0.4, lambda: host.send({"type": "tool_result", "id": msg["id"], "result": 1})).start()
                    elif msg["type"] == "exit":
                        execs.append(msg)
                        if len(execs) == 1:
                            time.sleep(0.5)  # past the late answer
                            host.send_raw(exec_frame("print('next call ran')", session=True))
                        else:
                            host.close()

                r = run(first=exec_frame("import _bridge_relay\n_bridge_relay.call_tool('s', 't', {})", session=True), on_frame=on_frame)
                exits = r.of_type("exit")
                self.assertEqual([e["status"] for e in exits], ["error", "ok"], r.diag)
                self.assertEqual(exits[0]["error"]["type"], "KeyboardInterrupt")
                self.assertEqual(r.stdout, "next call ran\n")
                self.assertLess(r.seconds, 10)

    def test_interrupt_between_calls_is_ignored(self) -> None:
        r = self.session(["x = 1", "print(x)"], idle_interrupt=True)
        self.assertEqual([e["status"] for e in r.of_type("exit")], ["ok", "ok"], r.diag)
        self.assertEqual(r.stdout, "1\n")

    def test_tool_calls_between_calls_fail_in_their_thread(self) -> None:
        code = """import threading, time, _bridge_relay
errors = []
def later():
    time.sleep(0.2)
    try:
        _bridge_relay.call_tool("s", "t", {})
    except RuntimeError as e:
        errors.append(str(e))
threading.Thread(target=later).start()
"""
        r = self.session([code, "print(errors)"], gap=0.6)
        self.assertEqual([e["status"] for e in r.of_type("exit")], ["ok", "ok"], r.diag)
        self.assertIn("only available while a call runs", r.stdout)
        self.assertEqual(r.of_type("tool_call"), [])

    def test_exec_while_code_runs_is_a_protocol_error(self) -> None:
        def on_frame(host: FakeHost, msg: dict) -> None:
            if msg["type"] == "stdout":
                host.send_raw(exec_frame("print(2)", session=True))

        r = run(first=exec_frame("import time\nprint(1, flush=True)\ntime.sleep(5)", session=True), on_frame=on_frame)
        self.assertEqual(r.returncode, 2, r.diag)
        self.assertIn("exec while code runs", r.diag)

    def test_session_must_be_a_boolean(self) -> None:
        msg = {"type": "exec", "version": VERSION, "code": "pass", "output_limit": 10, "files": FILES, "session": 1}
        r = run(first=frame(msg))
        self.assertEqual(r.returncode, 2, r.diag)
        self.assertIn("exec.session is not a boolean", r.diag)


class Peer:
    """One accepted connection of the relay, read by the test itself."""

    def __init__(self, listener: socket.socket) -> None:
        self.conn, _ = listener.accept()
        self.conn.settimeout(TIMEOUT)

    def recv(self) -> dict | None:
        """The next frame, checked as FakeHost checks it; None at EOF."""
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = self.conn.recv(1 << 16)
            if not chunk:
                assert data == b"", "runner closed the connection mid-frame"
                return None
            data += chunk
            n = int.from_bytes(data[:4], "big") if len(data) >= 4 else 0
            if len(data) >= 4 and len(data) > 4 + n:
                raise AssertionError("two frames in one read: the test reads one at a time")
        msg = json.loads(data[4:])
        required, optional = RUNNER_FRAMES[msg["type"]]
        keys = msg.keys() - {"type"}
        assert required <= keys <= required | optional, f"{msg['type']} frame with fields {sorted(keys)}"
        return msg

    def send(self, msg: dict) -> None:
        self.conn.sendall(frame(msg))

    def call(self, code: str) -> tuple[str, dict]:
        """Runs code as a session's call: its stdout and its exit."""
        self.conn.sendall(exec_frame(code, session=True))
        out = ""
        while True:
            msg = self.recv()
            assert msg is not None, "runner hung up during a call"
            if msg["type"] == "stdout":
                out += msg["data"]
            elif msg["type"] == "exit":
                return out, msg

    def close(self) -> None:
        self.conn.close()


class ParkTest(unittest.TestCase):
    """park between two calls: the runner lets go of the relay, waits for
    SIGUSR1, and connects to a new listener at the same path with the
    token of the token file (docs/protocol.md, "Parking")."""

    def start(self, token_file: bool = True) -> tuple[subprocess.Popen, Peer]:
        self.dir = tempfile.mkdtemp(prefix="bridge-runner-park-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.path = os.path.join(self.dir, "relay.sock")
        self.token_file = os.path.join(self.dir, "token")
        self.listener: socket.socket | None = None
        self.listen()
        self.log = open(os.path.join(self.dir, "runner.log"), "w+b")
        self.addCleanup(self.log.close)
        env = {
            "BRIDGE_RELAY_SOCKET": self.path,
            "BRIDGE_RELAY_TOKEN": TOKEN,
            "HOME": tempfile.gettempdir(),
            "LANG": "C.UTF-8",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "BRIDGE_OUTPUTS": os.path.join(self.dir, "outputs"),
        }
        if token_file:
            env["BRIDGE_RELAY_TOKEN_FILE"] = self.token_file
        proc = subprocess.Popen([sys.executable, "-I", "-B", str(RUNNER)], env=env, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait()))
        peer = Peer(self.listener)
        self.addCleanup(peer.close)
        hello = peer.recv()
        self.assertEqual((hello["type"], hello["token"], hello["version"]), ("hello", TOKEN, VERSION))
        self.assertNotIn("resumed", hello)
        self.assertEqual(hello.get("parks"), SPARES if token_file else None)
        return proc, peer

    def diag(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def wait_diag(self, text: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while text not in self.diag():
            self.assertLess(time.monotonic(), deadline, f"{text!r} never in the runner's diagnostics: {self.diag()}")
            time.sleep(0.02)

    def listen(self) -> None:
        """A new listener at the relay's path, as a restored sandbox's run
        folder has."""
        if self.listener is not None:
            self.listener.close()
            os.unlink(self.path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(TIMEOUT)
        self.addCleanup(self.listener.close)

    def park(self, peer: Peer) -> None:
        peer.send({"type": "park"})
        self.assertEqual(peer.recv(), {"type": "parked"}, self.diag())
        self.assertIsNone(peer.recv(), "the runner kept the relay after parked")

    def resume(self, proc: subprocess.Popen, token: str, parks: int) -> Peer:
        self.listen()
        with open(self.token_file, "w") as f:
            f.write(token + "\n")
        os.kill(proc.pid, signal.SIGUSR1)
        peer = Peer(self.listener)
        self.addCleanup(peer.close)
        hello = peer.recv()
        self.assertEqual(hello, {"type": "hello", "version": VERSION, "token": token, "python": hello["python"], "parks": parks, "resumed": True})
        return peer

    def test_park_and_resume_twice(self) -> None:
        proc, peer = self.start()
        self.assertEqual(peer.call("x = 41\nimport os")[1]["status"], "ok")
        self.park(peer)
        peer = self.resume(proc, "second-token", SPARES - 1)
        out, exit = peer.call("x += 1\nprint(x, os.environ.get('BRIDGE_RELAY_TOKEN_FILE'))")
        self.assertEqual((out, exit["status"]), ("42 None\n", "ok"), self.diag())
        self.park(peer)  # a second park, with the next spare
        peer = self.resume(proc, "third-token", SPARES - 2)
        self.assertEqual(peer.call("print(x)")[0], "42\n", self.diag())
        peer.close()  # the bridge ends the session: the runner exits quietly
        self.assertEqual(proc.wait(TIMEOUT), 0, self.diag())

    def test_signals_outside_a_park_do_nothing(self) -> None:
        proc, peer = self.start()
        peer.call("x = 1")
        os.kill(proc.pid, signal.SIGUSR1)  # between calls: held, then dropped by the park
        self.assertEqual(peer.call("print(x)")[0], "1\n", self.diag())
        with open(self.token_file, "w") as f:
            f.write("stale-token")
        self.park(peer)
        # The old listener is still there: a park woken by the early signal
        # would connect to it at once.
        self.listener.settimeout(0.5)
        with self.assertRaises(socket.timeout):
            self.listener.accept()
        # Woken before the bridge is ready: no token file, then no listener.
        # (Each signal is taken before the next: two pending are one.)
        os.unlink(self.token_file)
        os.kill(proc.pid, signal.SIGUSR1)
        self.wait_diag("cannot be read")
        self.listener.close()
        os.unlink(self.path)
        self.listener = None
        with open(self.token_file, "w") as f:
            f.write("early-token")
        os.kill(proc.pid, signal.SIGUSR1)
        self.wait_diag("is not there yet")
        self.assertIsNone(proc.poll(), self.diag())
        peer = self.resume(proc, "ready-token", SPARES - 1)
        self.assertEqual(peer.call("print(x)")[0], "1\n", self.diag())

    def test_spares_the_code_spoiled_are_passed_over(self) -> None:
        # The spares are the code's descriptors too: one closed (its number
        # then taken by a file) and one connected elsewhere are dropped,
        # and the runner resumes with the next.
        proc, peer = self.start()
        code = (
            "import errno, os, socket\n"
            "spares = []\n"
            "for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):\n"
            "    try:\n"
            "        s = socket.socket(fileno=os.dup(fd))\n"
            "    except OSError:\n"
            "        continue\n"
            "    try:\n"
            "        s.getpeername()\n"
            "    except OSError as e:\n"
            "        if e.errno == errno.ENOTCONN and s.family == socket.AF_UNIX:\n"
            "            spares.append(fd)\n"
            "    s.close()\n"
            "os.close(spares[-1])\n"
            "keep = open('/dev/null')\n"  # takes the closed spare's number
            "held = socket.socket(fileno=spares[-2])\n"  # kept: a socket object closes its fd when collected
            f"held.connect({self.path!r})\n"
            "print(len(spares), keep.fileno() == spares[-1])\n"
        )
        out, exit = peer.call(code)
        self.assertEqual(out, f"{SPARES} True\n", self.diag() + str(exit))
        self.park(peer)
        peer = self.resume(proc, "after-spoiling", SPARES - 3)
        self.assertEqual(peer.call("print(len(spares))")[0], f"{SPARES}\n")
        self.assertEqual(self.diag().count("a spare socket is unusable"), 2, self.diag())
        self.assertIn("Socket operation on non-socket", self.diag())
        self.assertIn("Transport endpoint is already connected", self.diag())

    def test_park_while_code_runs_is_a_protocol_error(self) -> None:
        proc, peer = self.start()
        peer.conn.sendall(exec_frame("import time\nprint(1, flush=True)\ntime.sleep(5)", session=True))
        self.assertEqual(peer.recv()["type"], "stdout")
        peer.send({"type": "park"})
        self.assertEqual(proc.wait(TIMEOUT), 2, self.diag())
        self.assertIn("park while code runs", self.diag())

    def test_park_needs_the_token_file_and_a_spare(self) -> None:
        proc, peer = self.start(token_file=False)
        peer.call("pass")
        peer.send({"type": "park"})
        self.assertEqual(proc.wait(TIMEOUT), 2, self.diag())
        self.assertIn("started without BRIDGE_RELAY_TOKEN_FILE", self.diag())
        proc, peer = self.start()
        for parks in range(SPARES - 1, -1, -1):
            peer.call("pass")
            self.park(peer)
            peer = self.resume(proc, f"token-{parks}", parks)
        peer.call("pass")
        peer.send({"type": "park"})
        self.assertEqual(proc.wait(TIMEOUT), 2, self.diag())
        self.assertIn("no spare socket is left", self.diag())

    def test_park_with_fields_is_a_protocol_error(self) -> None:
        proc, peer = self.start()
        peer.call("pass")
        peer.send({"type": "park", "now": True})
        self.assertEqual(proc.wait(TIMEOUT), 2, self.diag())
        self.assertIn("unknown fields ['now']", self.diag())


class FileNameTest(unittest.TestCase):
    def test_names(self) -> None:
        rf = runner_files()
        good = [b"a", b"sub/b.txt", b"...", b"..x", b"caf\xc3\xa9", b"a\nb", b"x" * 255, b"/".join([b"y" * 200] * 5)]
        for rel in good:
            with self.subTest(rel=rel):
                self.assertEqual(rf.file_name(rel, tuple(rel.split(b"/"))), rel.decode())
        bad = [b"../etc/passwd", b"a/../b", b"./a", b"a//b", b"", b"a\0b", b"x" * 256, b"/".join([b"y" * 200] * 6),
               b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]
        for rel in bad:
            with self.subTest(rel=rel):
                self.assertIsNone(rf.file_name(rel, tuple(rel.split(b"/"))))

    def test_bad_name_as_reported(self) -> None:
        rf = runner_files()
        self.assertEqual(rf.bad_name(b"bad-\xff.txt"), "bad-\\xff.txt")
        self.assertEqual(rf.bad_name(b"a\0b"), "a\\x00b")
        self.assertEqual(rf.bad_name("\u20ac".encode() * 100), "\u20ac" * 85)  # 255 bytes: whole characters only
        self.assertEqual(len(rf.bad_name(b"\xff" * 100).encode()), 256)


class MatplotlibCacheTest(unittest.TestCase):
    def test_cache_copied_into_mplconfigdir(self) -> None:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
            Path(cache, "fontlist-v390.json").write_text('{"fonts": []}')
            Path(cache, "sub").mkdir()
            Path(cache, "sub", "nested").write_text("n")
            os.symlink("/etc/passwd", os.path.join(cache, "link"))
            mpl = os.path.join(home, "mpl", "config")
            code = "import os\nd = os.environ['MPLCONFIGDIR']\nprint(sorted(os.listdir(d)), open(os.path.join(d, 'fontlist-v390.json')).read())"
            r = run(code, env={"MPLCONFIGDIR": mpl}, mpl_cache=cache)
            self.assertEqual(r.stdout, "['fontlist-v390.json'] {\"fonts\": []}\n", r.diag)

    def test_nothing_without_the_cache_or_the_variable(self) -> None:
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
            Path(cache, "fontlist.json").write_text("{}")
            mpl = os.path.join(home, "mpl")
            r = run("import os\nprint(os.path.exists(os.environ.get('MPLCONFIGDIR', '/nonexistent')))", env={"MPLCONFIGDIR": mpl}, mpl_cache=os.path.join(cache, "absent"))
            self.assertEqual(r.stdout, "False\n")  # the default cache folder does not exist
            r = run("import os\nprint(os.environ.get('MPLCONFIGDIR'))", mpl_cache=cache)
            self.assertEqual(r.stdout, "None\n")
            self.assertEqual(r.diag, "")


def doc_examples(path: Path) -> list[tuple[int, str, str, str]]:
    """The examples of a doc as integration/upstream_test.go's docExamples
    finds them: (line, marker, code, expected output)."""
    out = []
    cur = None
    marker = ""
    in_block = ""
    buf: list[str] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if in_block and line == "```":
            if in_block == "python":
                cur = (n, marker, "".join(buf))
            elif cur is not None:
                out.append((*cur, "".join(buf)))
                cur = None
            in_block = ""
            buf = []
        elif in_block:
            buf.append(line + "\n")
        elif line.startswith("<!-- example:"):
            marker = line
        elif line == "```python" and marker:
            in_block = "python"
        elif line == "```text" and cur is not None:
            in_block = "text"
        elif line.strip():
            marker = ""
            assert cur is None or line.startswith("```"), f"{path}:{cur[0]}: an example without a text block after it"
    return out


class DocExamplesTest(unittest.TestCase):
    """docs/sandbox-api.md's examples that need no MCP server, run here too
    (the integration test runs them all, in the real sandbox)."""

    def test_examples_without_servers(self) -> None:
        doc = RUNNER.parent.parent.parent / "docs" / "sandbox-api.md"
        examples = [e for e in doc_examples(doc) if e[1] == "<!-- example: -->"]
        self.assertGreaterEqual(len(examples), 2)
        for line, _, code, want in examples:
            with self.subTest(line=line):
                r = run(code)
                self.assertEqual(r.exit["status"], "ok", r.stderr)
                self.assertEqual(r.stdout, want.replace("/tmp/outputs", r.outputs))


class MCPToolsTest(unittest.TestCase):
    """mcp_tools in the runner, against a host that answers like a bridge."""

    SERVERS = [{"name": "server-everything", "description": "test", "module": "server_everything"}]
    TOOLS = [
        {
            "name": "echo",
            "description": "Echoes back the input string",
            "input_schema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
        },
        {
            "name": "class",
            "description": "A tool named like a keyword",
            "input_schema": {"type": "object", "properties": {"from": {"type": "string"}, "n": {"type": "integer"}}, "required": ["from"]},
        },
    ]

    def host(self, host: FakeHost, msg: dict) -> None:
        if msg["type"] == "query":
            result = {"servers": self.SERVERS, "tools": self.TOOLS, "search": []}[msg["op"]]
            host.send({"type": "tool_result", "id": msg["id"], "result": result})
        elif msg["type"] == "tool_call":
            if msg["tool"] == "echo":
                result = {"content": [{"type": "text", "text": f"Echo: {msg['args']['message']}"}]}
            elif msg["tool"] == "class":
                result = {"content": [{"type": "text", "text": json.dumps(msg["args"])}], "structuredContent": msg["args"]}
            else:
                host.send({"type": "tool_result", "id": msg["id"], "error": {"type": "unknown_tool", "message": f"no tool {msg['tool']}; did you mean: echo?"}})
                return
            host.send({"type": "tool_result", "id": msg["id"], "result": result})

    def test_functions_and_calls(self) -> None:
        code = (
            "import asyncio, inspect, mcp_tools\n"
            "from mcp_tools.server_everything import echo, class_\n"
            "print(echo('hi'))\n"
            "print(class_('a', n=2))\n"
            "print(inspect.signature(class_))\n"
            "print(await asyncio.gather(echo.acall('x'), mcp_tools.acall('server-everything', 'echo', message='y')))\n"
            "print(mcp_tools.call('server-everything', 'echo', {'message': 'z'}))\n"
            "try:\n"
            "    mcp_tools.call('server-everything', 'ech')\n"
            "except mcp_tools.UnknownToolError as e:\n"
            "    print(type(e).__name__, e)\n"
        )
        r = run(code, on_frame=self.host)
        self.assertEqual(r.exit["status"], "ok", r.stderr)
        self.assertEqual(
            r.stdout,
            "Echo: hi\n"
            "{'from': 'a', 'n': 2}\n"
            "(from_: str, *, n: int | None = None)\n"
            "['Echo: x', 'Echo: y']\n"
            "Echo: z\n"
            "UnknownToolError no tool ech; did you mean: echo?\n",
        )
        ops = [q["op"] for q in r.of_type("query")]
        self.assertEqual(ops, ["servers", "tools"])  # each asked once

    def test_uncaught_error_names_the_class(self) -> None:
        r = run("import mcp_tools\nmcp_tools.call('server-everything', 'nope')", on_frame=self.host)
        self.assertEqual(r.exit["error"]["type"], "mcp_tools.UnknownToolError")
        self.assertEqual(r.exit["error"]["message"], "no tool nope; did you mean: echo?")


if __name__ == "__main__":
    unittest.main()
