"""Tests for the mcp_tools package (images/runner/lib/mcp_tools), in process.

A fake _bridge_relay module in sys.modules answers the queries and tool
calls from in-memory data, as the runner's relay would pass on the bridge's
answers. test_runner.py covers the real relay over a socket.

Run from the repository root: python3 -m unittest discover -s images/runner -v
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib
import inspect
import io
import pickle
import os
import sys
import tempfile
import threading
import types
import unittest
from pathlib import Path
from typing import Any, Callable
from unittest import mock

sys.path.insert(0, str(Path(__file__).with_name("lib")))

import mcp_tools  # noqa: E402
from mcp_tools import _core, _help, _show  # noqa: E402


class RelayError(Exception):
    """As the runner's _bridge_relay.ToolError."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(type, message)
        self.type = type
        self.message = message


def text(s: str) -> dict:
    return {"type": "text", "text": s}


def reply_tool(args: dict) -> Any:
    """The tool "reply" answers with the raw result it is given."""
    return args["result"]


ECHO = {
    "name": "echo",
    "title": "Echo Tool",
    "description": "Echoes back the input string",
    "input_schema": {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "Message to echo"}},
        "required": ["message"],
    },
    "annotations": {"readOnlyHint": True},
}
GET_SUM = {
    "name": "get-sum",
    "description": "Returns the sum of two numbers",
    "input_schema": {
        "type": "object",
        # Key order may not survive the hops to the sandbox (Go maps sort
        # it); "required" gives the order of the positional parameters.
        "properties": {"b": {"type": "number", "description": "Second number"}, "a": {"type": "number", "description": "First number"}},
        "required": ["a", "b"],
    },
}
CLASS = {
    "name": "class",
    "description": "Finds classes. Second sentence that the summary leaves out.\nMore lines.",
    "input_schema": {
        "type": "object",
        "properties": {
            "from": {"type": "string", "description": "Where to start"},
            "to": {"type": "string"},
            "max-count": {"type": "integer", "default": 10},
            "type": {"enum": ["a", "b"]},
        },
        "required": ["from"],
    },
    "output_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "returns": "{n?: int}",  # the bridge's proxy.ResultShape of output_schema
}
FREE = {
    "name": "free",
    "description": "Takes anything.",
    "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": True},
}
LONG = {
    "name": "long",
    "description": "word " * 60,
    "input_schema": {"type": "object", "properties": {}},
}
CLASHES = [
    {"name": "a-b", "description": "first", "input_schema": {"type": "object"}},
    {"name": "a_b", "description": "second", "input_schema": {"type": "object"}},
    {"name": "__doc__", "description": "third", "input_schema": {"type": "object"}},
]
REPLY = {"name": "reply", "description": "Answers with the result it is given.", "input_schema": {"type": "object", "properties": {"result": {}}, "required": ["result"]}}

SERVERS = [
    {"name": "everything", "description": "The reference server", "module": "everything"},
    {"name": "server-everything", "description": "The same, with a dash", "module": "server_everything"},
    {"name": "help", "description": "Named like an mcp_tools function"},  # module computed here: help_
    {"name": "1password", "description": "Starts with a digit", "module": "_1password"},
]
TOOLS = {
    "everything": [ECHO, GET_SUM, REPLY],
    "server-everything": [ECHO, GET_SUM, CLASS, FREE, LONG, REPLY],
    "help": CLASHES,
    "1password": [REPLY],
}


class FakeRelay:
    """Answers queries and tool calls from SERVERS and TOOLS; records them.
    handlers[(server, tool)](args) gives a tool's raw result or raises
    RelayError; by default echo, get-sum and reply behave as their names say."""

    def __init__(self, servers: list | None = None, tools: dict | None = None) -> None:
        self.servers = SERVERS if servers is None else servers
        self.tools = TOOLS if tools is None else tools
        self.queries: list[tuple[str, dict]] = []
        self.calls: list[tuple[str, str, dict]] = []
        self.search_results: list = []
        self.handlers: dict[tuple[str, str], Callable[[dict], Any]] = {}
        self.call_error: RelayError | None = None
        self.query_error: RelayError | None = None
        self.threaded = False  # answer blocking calls from another thread, as the runner does
        self.resources: Any = {"resources": [], "templates": []}  # the answer to the resources query
        self.reads: dict[str, Any] = {}  # uri -> the answer to read_resource, or a RelayError

    def module(self) -> types.ModuleType:
        mod = types.ModuleType("_bridge_relay")
        mod.PROTOCOL_VERSION = 2
        mod.ToolError = RelayError
        mod.call_tool = self.call_tool
        mod.acall_tool = self.acall_tool
        mod.query = self.query
        mod.aquery = self.aquery
        return mod

    def query(self, op: str, args: dict | None = None) -> Any:
        self.queries.append((op, args))
        if self.query_error is not None:
            raise self.query_error
        if op == "servers":
            return [dict(s) for s in self.servers]
        if op == "tools":
            if args["server"] not in self.tools:
                raise RelayError("unknown_server", f"unknown server {args['server']!r}; did you mean: everything?")
            return self.tools[args["server"]]
        if op == "search":
            return self.search_results
        if op == "resources":
            return self.resources
        if op == "read_resource":
            got = self.reads.get(args["uri"])
            if isinstance(got, RelayError):
                raise got
            if got is None:
                raise RelayError("unknown_resource", f"no server lists the resource {args['uri']!r}; servers with resources: docs, files")
            return got
        raise RelayError("invalid", f"bad op {op}")

    async def aquery(self, op: str, args: dict | None = None) -> Any:
        await asyncio.sleep(0)
        return self.query(op, args)

    def _answer(self, server: str, tool: str, args: dict) -> Any:
        self.calls.append((server, tool, args))
        if self.call_error is not None:
            raise self.call_error
        handler = self.handlers.get((server, tool))
        if handler is not None:
            return handler(args)
        if tool == "echo":
            return {"content": [text(f"Echo: {args['message']}")]}
        if tool == "get-sum":
            return {"content": [text(f"The sum of {args['a']} and {args['b']} is {args['a'] + args['b']}.")]}
        if tool == "reply":
            return reply_tool(args)
        return {"content": [text(repr(args))]}

    def call_tool(self, server: str, tool: str, args: dict | None = None) -> Any:
        if not self.threaded:
            return self._answer(server, tool, args)
        box: list = []
        t = threading.Thread(target=lambda: box.append(self._capture(server, tool, args)))
        t.start()
        t.join(10)
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _capture(self, server: str, tool: str, args: dict) -> tuple[bool, Any]:
        try:
            return True, self._answer(server, tool, args)
        except RelayError as e:
            return False, e

    async def acall_tool(self, server: str, tool: str, args: dict | None = None) -> Any:
        await asyncio.sleep(0.01)
        return self._answer(server, tool, args)


def reset() -> None:
    """Forgets the caches and the server modules, as a new run would."""
    _core._servers = None
    _core._tools.clear()
    for name in [n for n in sys.modules if n.startswith("mcp_tools.") and n[len("mcp_tools.") :] not in _core.RESERVED]:
        del sys.modules[name]
        with contextlib.suppress(AttributeError):
            delattr(mcp_tools, name.split(".", 1)[1])


class Base(unittest.TestCase):
    def setUp(self) -> None:
        reset()
        self.relay = FakeRelay()
        self._saved = sys.modules.get("_bridge_relay")
        sys.modules["_bridge_relay"] = self.relay.module()

    def tearDown(self) -> None:
        if self._saved is None:
            sys.modules.pop("_bridge_relay", None)
        else:
            sys.modules["_bridge_relay"] = self._saved
        reset()

    def reply(self, raw: dict, server: str = "everything") -> Any:
        return mcp_tools.call(server, "reply", result=raw)


class ListingTest(Base):
    def test_servers(self) -> None:
        got = mcp_tools.servers()
        self.assertEqual(
            got,
            [
                {"name": "everything", "description": "The reference server", "module": "everything"},
                {"name": "server-everything", "description": "The same, with a dash", "module": "server_everything"},
                {"name": "help", "description": "Named like an mcp_tools function", "module": "help_"},
                {"name": "1password", "description": "Starts with a digit", "module": "_1password"},
            ],
        )
        got[0]["name"] = "changed"  # a copy: the cache stays as it was
        self.assertEqual(mcp_tools.servers()[0]["name"], "everything")
        self.assertEqual(self.relay.queries, [("servers", {})])  # fetched once per run

    def test_tools(self) -> None:
        got = mcp_tools.tools("server-everything")
        self.assertEqual([t.keys() for t in got], [{"name", "summary"}] * 6)
        summaries = {t["name"]: t["summary"] for t in got}
        self.assertEqual(summaries["echo"], "Echoes back the input string")
        self.assertEqual(summaries["class"], "Finds classes.")
        self.assertLessEqual(len(summaries["long"]), 100)
        self.assertTrue(summaries["long"].startswith("word word"))
        self.assertTrue(summaries["long"].endswith("..."))
        mcp_tools.tools("server-everything")
        self.assertEqual(self.relay.queries, [("tools", {"server": "server-everything"})])

    def test_unknown_server(self) -> None:
        with self.assertRaises(mcp_tools.UnknownServerError) as cm:
            mcp_tools.tools("evrything")
        self.assertIn("did you mean: everything?", str(cm.exception))
        self.assertEqual((cm.exception.type, cm.exception.server), ("unknown_server", "evrything"))
        self.assertIsInstance(cm.exception, LookupError)

    def test_describe(self) -> None:
        d = mcp_tools.describe("server-everything", "class")
        self.assertEqual(
            d.keys(), {"server", "name", "title", "description", "input_schema", "output_schema", "returns", "annotations", "module_function"}
        )
        self.assertEqual(d["server"], "server-everything")
        self.assertEqual(d["name"], "class")
        self.assertIsNone(d["title"])
        self.assertEqual(d["description"], CLASS["description"])
        self.assertEqual(d["input_schema"], CLASS["input_schema"])
        self.assertEqual(d["output_schema"], CLASS["output_schema"])
        self.assertEqual(d["returns"], "{n?: int}")
        self.assertIsNone(d["annotations"])
        self.assertEqual(d["module_function"], "mcp_tools.server_everything.class_")
        d["input_schema"]["properties"].clear()  # a copy
        self.assertIn("from", mcp_tools.describe("server-everything", "class")["input_schema"]["properties"])

        e = mcp_tools.describe("everything", "echo")
        self.assertEqual((e["title"], e["annotations"]), ("Echo Tool", {"readOnlyHint": True}))
        self.assertEqual((e["output_schema"], e["returns"]), (None, None))
        self.assertEqual(mcp_tools.describe("everything", "get_sum")["name"], "get-sum")  # by function name
        self.assertEqual(mcp_tools.describe("help", "a_b")["module_function"], "mcp_tools.help_.a_b")
        self.assertEqual(mcp_tools.describe("help", "a-b")["module_function"], "mcp_tools.help_.a_b_")

    def test_describe_returns_from_an_older_host(self) -> None:
        # A bridge that sends no "returns" (or not a text) leaves it None.
        old = {k: v for k, v in CLASS.items() if k != "returns"}
        self.relay.tools = {"old": [old, dict(old, name="empty", returns=""), dict(old, name="odd", returns={"n": "int"})]}
        for tool in ("class", "empty", "odd"):
            with self.subTest(tool=tool):
                d = mcp_tools.describe("old", tool)
                self.assertEqual(d["output_schema"], CLASS["output_schema"])
                self.assertIsNone(d["returns"])

    def test_describe_unknown_tool(self) -> None:
        with self.assertRaises(mcp_tools.UnknownToolError) as cm:
            mcp_tools.describe("everything", "ech")
        e = cm.exception
        self.assertIn("did you mean: echo?", str(e))
        self.assertEqual((e.type, e.server, e.tool), ("unknown_tool", "everything", "ech"))

    def test_search(self) -> None:
        self.relay.search_results = [
            {"server": "everything", "tool": "get-sum", "description": "Returns the sum of two numbers.\nDetails.", "score": 3.5, "params": ["a", "b"]},
            {"server": "everything", "tool": "echo", "description": "Echoes back the input string", "score": 1.0, "params": ["message"]},
        ]
        got = mcp_tools.search("add numbers", limit=2)
        self.assertEqual(self.relay.queries, [("search", {"query": "add numbers", "limit": 2})])
        self.assertEqual(
            got,
            [
                {"server": "everything", "tool": "get-sum", "description": "Returns the sum of two numbers.", "params": ["a", "b"], "score": 3.5},
                {"server": "everything", "tool": "echo", "description": "Echoes back the input string", "params": ["message"], "score": 1.0},
            ],
        )
        self.assertEqual(list(got[0]), ["server", "tool", "description", "params", "score"])
        mcp_tools.search("x")
        self.assertEqual(self.relay.queries[-1], ("search", {"query": "x", "limit": 5}))
        for bad in (0, -1, 2.0, True):
            with self.subTest(limit=bad), self.assertRaises(ValueError):
                mcp_tools.search("x", limit=bad)
        with self.assertRaises(TypeError):
            mcp_tools.search(["x"])

    def test_search_returns(self) -> None:
        self.relay.search_results = [
            {"server": "s", "tool": "list", "description": "Lists.", "score": 2.0, "params": [], "returns": "{items: [{id: int}], total: int}"},
            {"server": "s", "tool": "echo", "description": "Echoes.", "score": 1.5, "params": ["message"]},
            {"server": "s", "tool": "empty", "description": "", "score": 1.0, "params": [], "returns": ""},
            {"server": "s", "tool": "odd", "description": "", "score": 0.5, "params": [], "returns": None},
            {"skill": "top", "description": "Top.", "signature": "()", "score": 0.2, "returns": "int"},
        ]
        got = mcp_tools.search("list")
        self.assertEqual(list(got[0]), ["server", "tool", "description", "params", "returns", "score"])
        self.assertEqual(got[0]["returns"], "{items: [{id: int}], total: int}")
        for hit in got[1:]:
            with self.subTest(hit=hit):
                self.assertNotIn("returns", hit)  # only a tool with a shape has the key

    def test_query_errors(self) -> None:
        self.relay.query_error = RelayError("timeout", "the bridge did not answer")
        with self.assertRaises(mcp_tools.ToolTimeoutError) as cm:
            mcp_tools.servers()
        self.assertEqual(str(cm.exception), "the bridge did not answer")
        self.relay.query_error = None
        self.assertEqual(len(mcp_tools.servers()), 4)  # errors are not cached


class DecodeTest(Base):
    def test_structured_content_wins(self) -> None:
        raw = {"content": [text('{"a": 1}')], "structuredContent": {"a": 2}}
        self.assertEqual(self.reply(raw), {"a": 2})

    def test_null_structured_content_is_absent(self) -> None:
        self.assertEqual(self.reply({"content": [text("hi")], "structuredContent": None}), "hi")

    def test_json_text(self) -> None:
        self.assertEqual(self.reply({"content": [text('{"a": [1, 2]}')]}), {"a": [1, 2]})
        self.assertEqual(self.reply({"content": [text("42")]}), 42)
        self.assertEqual(self.reply({"content": [text('"quoted"')]}), "quoted")

    def test_plain_text(self) -> None:
        self.assertEqual(self.reply({"content": [text("Echo: hi")]}), "Echo: hi")
        self.assertEqual(self.reply({"content": [text("NaN")]}), "NaN")  # not JSON, though Python's json takes it
        self.assertEqual(self.reply({"content": [text("")]}), "")

    def test_several_items(self) -> None:
        image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        raw = {"content": [text("one"), text("[2]"), image]}
        self.assertEqual(self.reply(raw), ["one", [2], image])

    def test_empty(self) -> None:
        self.assertIsNone(self.reply({"content": []}))
        self.assertIsNone(self.reply({}))

    def test_image_and_resource_stay_dicts(self) -> None:
        image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        self.assertEqual(self.reply({"content": [image]}), image)
        resource = {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}}
        self.assertEqual(self.reply({"content": [resource]}), resource)

    def test_is_error_raises_tool_error(self) -> None:
        raw = {"content": [text("first line"), {"type": "image", "data": "", "mimeType": "image/png"}, text("second")], "isError": True}
        with self.assertRaises(mcp_tools.ToolError) as cm:
            self.reply(raw)
        e = cm.exception
        self.assertEqual(e.message, "first line\nsecond")
        self.assertEqual(e.result, raw)
        self.assertEqual((e.type, e.server, e.tool), ("tool_error", "everything", "reply"))
        self.assertEqual(str(e), "tool 'reply' of MCP server 'everything' failed: first line\nsecond")
        self.assertIsInstance(e, mcp_tools.MCPToolsError)

    def test_is_error_without_text(self) -> None:
        with self.assertRaises(mcp_tools.ToolError) as cm:
            self.reply({"content": [], "isError": True})
        self.assertIn("without saying why", cm.exception.message)

    def test_call_raw_does_not_raise(self) -> None:
        raw = {"content": [text("bad")], "isError": True}
        self.assertEqual(mcp_tools.call_raw("everything", "reply", {"result": raw}), raw)
        self.assertEqual(asyncio.run(mcp_tools.acall_raw("everything", "reply", result=raw)), raw)


class ErrorTest(Base):
    CASES = {
        "tools_unavailable": (mcp_tools.ToolsUnavailableError, None),
        "unknown_server": (mcp_tools.UnknownServerError, LookupError),
        "unknown_tool": (mcp_tools.UnknownToolError, LookupError),
        "denied": (mcp_tools.ToolDeniedError, PermissionError),
        "limit": (mcp_tools.LimitExceededError, None),
        "upstream": (mcp_tools.UpstreamError, ConnectionError),
        "timeout": (mcp_tools.ToolTimeoutError, TimeoutError),
        "invalid": (mcp_tools.MCPToolsError, None),
        "something_new": (mcp_tools.MCPToolsError, None),
    }

    def test_relay_errors_map_to_exceptions(self) -> None:
        for kind, (cls, builtin) in self.CASES.items():
            for call in (
                lambda: mcp_tools.call("everything", "echo", message="x"),
                lambda: mcp_tools.call_raw("everything", "echo", message="x"),
                lambda: asyncio.run(mcp_tools.acall("everything", "echo", message="x")),
            ):
                with self.subTest(kind=kind):
                    self.relay.call_error = RelayError(kind, f"{kind} happened")
                    with self.assertRaises(mcp_tools.MCPToolsError) as cm:
                        call()
                    e = cm.exception
                    self.assertIs(type(e), cls)
                    if builtin is not None:
                        self.assertIsInstance(e, builtin)
                    self.assertEqual((e.type, e.message, str(e)), (kind, f"{kind} happened", f"{kind} happened"))
                    self.assertEqual((e.server, e.tool), ("everything", "echo"))
                    self.assertIsNone(e.__cause__)
                    self.assertTrue(e.__suppress_context__)  # the relay's own exception stays out of tracebacks

    def test_unknown_tool_message_is_the_bridges(self) -> None:
        message = 'unknown tool "ech" on server "everything"; did you mean: echo, get-sum?'
        self.relay.call_error = RelayError("unknown_tool", message)
        with self.assertRaises(mcp_tools.UnknownToolError) as cm:
            mcp_tools.call("everything", "ech")
        self.assertEqual(str(cm.exception), message)
        self.assertEqual(cm.exception.tool, "ech")

    def test_exceptions_pickle(self) -> None:
        errors = [
            mcp_tools.ToolTimeoutError("slow", type="timeout", server="s", tool="t"),
            mcp_tools.ToolError("failed", server="s", tool="t", result={"isError": True}),
            mcp_tools.MCPToolsError("new", type="new"),
        ]
        for e in errors:
            with self.subTest(e=type(e).__name__):
                back = pickle.loads(pickle.dumps(e))
                self.assertIs(type(back), type(e))
                self.assertEqual((back.type, back.message, back.server, back.tool, str(back)), (e.type, e.message, e.server, e.tool, str(e)))

    def test_qualified_names(self) -> None:
        self.assertEqual(mcp_tools.ToolError.__module__, "mcp_tools")
        self.assertEqual(mcp_tools.call.__module__, "mcp_tools")
        self.assertEqual(mcp_tools.help.__module__, "mcp_tools")

    def test_outside_the_sandbox(self) -> None:
        sys.modules["_bridge_relay"] = None  # import _bridge_relay raises ImportError
        for call in (mcp_tools.servers, lambda: mcp_tools.tools("x"), lambda: mcp_tools.call("a", "b"), lambda: mcp_tools.search("x")):
            with self.assertRaises(mcp_tools.ToolsUnavailableError) as cm:
                call()
            self.assertIn("sandbox", str(cm.exception))
        with self.assertRaises(ModuleNotFoundError) as cm:
            importlib.import_module("mcp_tools.everything")
        self.assertIn("sandbox", str(cm.exception))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            mcp_tools.help()
        self.assertIn("MCP tools are unavailable", out.getvalue())


class CallTest(Base):
    def test_arguments_as_dict_kwargs_or_both(self) -> None:
        mcp_tools.call("everything", "x", {"a": 1})
        mcp_tools.call("everything", "x", a=1)
        mcp_tools.call("everything", "x", {"a": 1}, b=2)
        mcp_tools.call("everything", "x")
        mcp_tools.call("everything", "x", server=1, tool=2, arguments=3)  # positional-only: these are the tool's
        self.assertEqual(
            [c[2] for c in self.relay.calls],
            [{"a": 1}, {"a": 1}, {"a": 1, "b": 2}, {}, {"server": 1, "tool": 2, "arguments": 3}],
        )
        args = {"a": 1}
        mcp_tools.call("everything", "x", args, b=2)
        self.assertEqual(args, {"a": 1})  # the caller's dict is left alone

    def test_bad_arguments(self) -> None:
        with self.assertRaisesRegex(TypeError, "'a' given both"):
            mcp_tools.call("everything", "x", {"a": 1}, a=2)
        with self.assertRaisesRegex(TypeError, "must be a dict"):
            mcp_tools.call("everything", "x", [1])
        self.assertEqual(self.relay.calls, [])

    def test_decoded_results(self) -> None:
        self.assertEqual(mcp_tools.call("everything", "echo", message="hi"), "Echo: hi")
        self.assertEqual(mcp_tools.call("everything", "get-sum", {"a": 2, "b": 3}), "The sum of 2 and 3 is 5.")

    def test_acall_gather(self) -> None:
        async def main() -> list:
            return await asyncio.gather(*(mcp_tools.acall("everything", "echo", message=str(n)) for n in range(5)))

        self.assertEqual(asyncio.run(main()), [f"Echo: {n}" for n in range(5)])

    def test_call_inside_a_running_event_loop(self) -> None:
        self.relay.threaded = True  # the answer comes from another thread, as from the runner's reader

        async def main() -> Any:
            await asyncio.sleep(0)
            return mcp_tools.call("everything", "echo", message="in loop")

        self.assertEqual(asyncio.run(main()), "Echo: in loop")


class ModuleTest(Base):
    def test_import_forms(self) -> None:
        import mcp_tools.everything
        from mcp_tools.server_everything import class_, echo, get_sum

        self.assertEqual(mcp_tools.everything.echo(message="a"), "Echo: a")
        self.assertEqual(echo("b"), "Echo: b")
        self.assertEqual(get_sum(1, b=2), "The sum of 1 and 2 is 3.")
        self.assertEqual(class_.tool, "class")
        self.assertEqual(class_.server, "server-everything")
        from mcp_tools import _1password, help_

        self.assertEqual(help_.__name__, "mcp_tools.help_")
        self.assertEqual(_1password.__all__, ["reply"])
        self.assertIs(mcp_tools.server_everything.echo, echo)
        self.assertEqual(self.relay.queries.count(("servers", {})), 1)  # once per run

    def test_attribute_without_import(self) -> None:
        self.assertEqual(mcp_tools.everything.get_sum(1, 1), "The sum of 1 and 1 is 2.")
        self.assertFalse(hasattr(mcp_tools, "nothing_here"))
        self.assertFalse(hasattr(mcp_tools, "_private"))
        self.assertEqual(self.relay.queries, [("servers", {}), ("tools", {"server": "everything"})])

    def test_unknown_module(self) -> None:
        with self.assertRaises(ModuleNotFoundError) as cm:
            importlib.import_module("mcp_tools.evrything")
        self.assertEqual(cm.exception.name, "mcp_tools.evrything")
        self.assertIn("did you mean: everything", str(cm.exception))

    def test_no_servers(self) -> None:
        self.relay.query_error = RelayError("tools_unavailable", "no MCP servers are configured")
        with self.assertRaises(ModuleNotFoundError) as cm:
            importlib.import_module("mcp_tools.everything")
        self.assertIn("no MCP servers are configured", str(cm.exception))
        with self.assertRaises(mcp_tools.ToolsUnavailableError):
            mcp_tools.servers()

    def test_module_contents(self) -> None:
        import mcp_tools.server_everything as m

        self.assertEqual(m.__all__, ["echo", "get_sum", "class_", "free", "long", "reply"])
        self.assertIn("'server-everything'", m.__doc__)
        self.assertIn("The same, with a dash", m.__doc__)
        import mcp_tools.help_ as h

        self.assertEqual(h.__all__, ["a_b_", "a_b", "__doc___"])  # a name that is its own alias keeps it
        self.assertEqual(h.a_b_.tool, "a-b")
        self.assertEqual(h.a_b.tool, "a_b")
        self.assertTrue(h.__doc__.startswith("The tools of the MCP server 'help' as functions.\n\nNamed like an mcp_tools function\n"))

    def test_signature(self) -> None:
        from mcp_tools.server_everything import class_, echo, free, get_sum, long

        self.assertEqual(str(inspect.signature(echo)), "(message: str)")
        self.assertEqual(str(inspect.signature(get_sum)), "(a: float, b: float)")
        self.assertEqual(
            str(inspect.signature(class_)),
            "(from_: str, *, max_count: int | None = None, to: str | None = None, type_=None)",
        )
        self.assertEqual(str(inspect.signature(free)), "(*, x: int | None = None, **more)")
        self.assertEqual(str(inspect.signature(long)), "()")
        self.assertEqual(inspect.signature(class_.acall), inspect.signature(class_))
        self.assertEqual(class_.__name__, "class_")
        self.assertEqual(class_.__module__, "mcp_tools.server_everything")
        self.assertEqual(class_.acall.__qualname__, "class_.acall")

    def test_arguments_use_the_tools_names(self) -> None:
        from mcp_tools.server_everything import class_, free

        class_("here", max_count=3)
        class_(from_="there", type_="a", to=None)  # None leaves an optional parameter out
        class_(None)  # a required one is sent as given
        free(x=1, y=2)
        self.assertEqual(
            [c[2] for c in self.relay.calls],
            [{"from": "here", "max-count": 3}, {"from": "there", "type": "a"}, {"from": None}, {"x": 1, "y": 2}],
        )
        with self.assertRaisesRegex(TypeError, r"^class_\(\): missing a required argument: 'from_'"):
            class_()
        with self.assertRaisesRegex(TypeError, r"^class_\(\): too many positional"):
            class_("a", "b")
        with self.assertRaisesRegex(TypeError, r"unexpected keyword argument 'max-count'|got an unexpected keyword"):
            class_("a", **{"max-count": 1})
        self.assertEqual(len(self.relay.calls), 4)

    def test_doc(self) -> None:
        from mcp_tools.server_everything import class_, echo

        self.assertTrue(echo.__doc__.startswith("Echoes back the input string\n\nParameters:\n  message: string, required: Message to echo\n"))
        doc = class_.__doc__
        self.assertIn("from_ (property 'from'): string, required: Where to start", doc)
        self.assertIn("max_count (property 'max-count'): integer, optional, default 10", doc)
        self.assertIn('type_ (property \'type\'): one of "a", "b", optional', doc)
        self.assertIn("await class_.acall(...)", doc)
        self.assertIn("\n\nReturns: {n?: int}\n\nCalls the tool 'class'", doc)
        self.assertIn("Its output schema: mcp_tools.describe('server-everything', 'class')['output_schema'].", doc)
        self.assertNotIn("Returns:", echo.__doc__)  # no output schema
        self.assertIn(doc, class_.acall.__doc__)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            help(class_)  # pydoc uses the signature
        self.assertIn("class_(from_: str, *, max_count: int | None = None, to: str | None = None", out.getvalue())

    def test_doc_from_an_older_host(self) -> None:
        # Without "returns" from the bridge the docstring has no Returns line,
        # only where the output schema is.
        self.relay.tools = {"everything": [{k: v for k, v in CLASS.items() if k != "returns"}]}
        from mcp_tools.everything import class_

        self.assertNotIn("Returns:", class_.__doc__)
        self.assertIn("Its output schema: mcp_tools.describe('everything', 'class')['output_schema'].", class_.__doc__)

    def test_acall(self) -> None:
        from mcp_tools.everything import echo

        async def main() -> list:
            return await asyncio.gather(echo.acall("x"), echo.acall(message="y"))

        self.assertEqual(asyncio.run(main()), ["Echo: x", "Echo: y"])
        with self.assertRaises(TypeError):
            asyncio.run(echo.acall())

    def test_tool_error_from_a_function(self) -> None:
        from mcp_tools.everything import reply

        with self.assertRaises(mcp_tools.ToolError) as cm:
            reply({"content": [text("nope")], "isError": True})
        self.assertEqual((cm.exception.server, cm.exception.tool, cm.exception.message), ("everything", "reply", "nope"))


class AliasTest(unittest.TestCase):
    def test_alias(self) -> None:
        cases = {
            "server-everything": "server_everything",
            "filesystem": "filesystem",
            "1password": "_1password",
            "": "_",
            "class": "class_",
            "type": "type_",
            "match": "match_",
            "_": "_",
            "a.b c": "a_b_c",
            "café": "caf_",
            "😀x": "_x",
            "None": "None_",
        }
        for name, want in cases.items():
            with self.subTest(name=name):
                self.assertEqual(_core.alias(name), want)

    def test_reserved(self) -> None:
        self.assertEqual(_core.alias("help", _core.RESERVED), "help_")
        self.assertEqual(_core.alias("call_raw", _core.RESERVED), "call_raw_")
        self.assertEqual(_core.alias("_core", _core.RESERVED), "_core_")
        self.assertEqual(_core.alias("x", {"x", "x_"}), "x__")

    def test_reserved_covers_the_package(self) -> None:
        import mcp_tools._help
        import mcp_tools._modules  # noqa: F401 - loaded lazily otherwise

        self.assertLessEqual(set(vars(mcp_tools)), _core.RESERVED)
        self.assertEqual(set(mcp_tools.__all__), set(_core.PUBLIC))

    def test_aliases_are_distinct(self) -> None:
        self.assertEqual(_core.aliases(["a-b", "a_b", "a.b"]), {"a-b": "a_b_", "a_b": "a_b", "a.b": "a_b__"})
        self.assertEqual(_core.aliases(["class", "class_"]), {"class": "class__", "class_": "class_"})


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class ResourcesTest(Base):
    def setUp(self) -> None:
        super().setUp()
        self.relay.resources = {
            "resources": [
                {"server": "docs", "uri": "docs://readme", "name": "readme", "mime": "text/markdown", "size": 11, "description": "Read me"},
                {"server": "files", "uri": "file:///a.bin", "name": "a.bin"},
                "junk",
            ],
            "templates": [{"server": "docs", "uri_template": "docs://item/{id}", "name": "item", "mime": "text/plain"}],
        }
        self.relay.reads = {
            "docs://readme": {"server": "docs", "uri": "docs://readme", "contents": [{"uri": "docs://readme", "mime": "text/markdown", "text": True, "data": b64("héllo".encode())}]},
            "file:///a.bin": {"server": "files", "uri": "file:///a.bin", "contents": [{"uri": "file:///a.bin", "text": False, "data": b64(b"\x00\xff")}]},
            "docs://pair": {"server": "docs", "uri": "docs://pair", "contents": [{"uri": "a", "text": True, "data": b64(b"a")}, {"uri": "b", "text": False, "data": b64(b"b")}]},
            "docs://secret": RelayError("denied", "no secrets"),
            "docs://big": RelayError("limit", "the resource is 9 MiB, over the 8 MiB the policy's resources.max_bytes allows"),
        }

    def test_listing(self) -> None:
        self.assertEqual(
            mcp_tools.resources(),
            [
                {"server": "docs", "uri": "docs://readme", "name": "readme", "mime": "text/markdown", "size": 11, "description": "Read me"},
                {"server": "files", "uri": "file:///a.bin", "name": "a.bin", "mime": None},
            ],
        )
        self.assertEqual(mcp_tools.resources("docs", templates=True), [{"server": "docs", "uri_template": "docs://item/{id}", "name": "item", "mime": "text/plain"}])
        self.assertEqual(self.relay.queries, [("resources", {"server": None}), ("resources", {"server": "docs"})])
        with self.assertRaises(TypeError):
            mcp_tools.resources(3)
        with self.assertRaises(TypeError):
            mcp_tools.resources(templates="yes")
        self.relay.resources = ["not", "a", "listing"]
        with self.assertRaises(mcp_tools.MCPToolsError):
            mcp_tools.resources()

    def test_read(self) -> None:
        self.assertEqual(mcp_tools.read_resource("docs://readme"), "héllo")
        self.assertEqual(mcp_tools.read_resource("file:///a.bin", server="files"), b"\x00\xff")
        self.assertEqual(mcp_tools.read_resource("docs://pair"), ["a", b"b"])
        self.assertEqual(self.relay.queries[:2], [("read_resource", {"uri": "docs://readme", "server": None}), ("read_resource", {"uri": "file:///a.bin", "server": "files"})])

    def test_errors(self) -> None:
        with self.assertRaises(mcp_tools.UnknownResourceError) as cm:
            mcp_tools.read_resource("docs://nothing")
        self.assertIsInstance(cm.exception, LookupError)
        self.assertIn("servers with resources: docs, files", str(cm.exception))
        with self.assertRaises(mcp_tools.ToolDeniedError) as denied:
            mcp_tools.read_resource("docs://secret")
        self.assertIsInstance(denied.exception, PermissionError)
        self.assertEqual(str(denied.exception), "no secrets")
        with self.assertRaises(mcp_tools.LimitExceededError):
            mcp_tools.read_resource("docs://big")
        for bad, exc in ((None, TypeError), (b"docs://readme", TypeError), ("", ValueError)):
            with self.assertRaises(exc):
                mcp_tools.read_resource(bad)
        with self.assertRaises(TypeError):
            mcp_tools.read_resource("docs://readme", server=1)

    def test_help_names_them(self) -> None:
        self.assertIn("read_resource", mcp_tools.read_resource.__module__ + mcp_tools.read_resource.__name__)
        self.assertEqual(mcp_tools.resources.__module__, "mcp_tools")
        self.assertIn("mcp_tools.read_resource(uri)", _help._TOOLS)
        self.assertIn("resources", mcp_tools.__all__)
        self.assertIn("read_resource", mcp_tools.__all__)


class HelpTest(Base):
    def help_text(self) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            mcp_tools.help()
        return out.getvalue()

    def test_no_servers(self) -> None:
        self.relay.query_error = RelayError("tools_unavailable", "no upstream servers")
        text = self.help_text()
        self.assertIn("bridge sandbox", text)
        self.assertIn("Limits: memory", text)
        self.assertIn("search(", text)
        self.assertIn("call(", text)
        self.assertIn("No MCP servers are connected to this bridge.", text)

    def test_servers_listed(self) -> None:
        text = self.help_text()
        self.assertIn(
            "Connected MCP servers: everything, server-everything (module server_everything), help (module help_), 1password (module _1password).",
            " ".join(text.split()),
        )
        self.assertLessEqual(len(text.splitlines()), 40)
        self.assertLessEqual(max(len(line) for line in text.splitlines()), 100)

    def test_stays_one_screen(self) -> None:
        self.relay.servers = [{"name": f"server-number-{n}", "description": "", "module": f"server_number_{n}"} for n in range(200)]
        text = self.help_text()
        self.assertLessEqual(len(text.splitlines()), 40)
        self.assertIn("mcp_tools.servers() lists them all", text)

    def test_other_errors(self) -> None:
        self.relay.query_error = RelayError("upstream", "the proxy crashed")
        self.assertIn("could not be listed: upstream: the proxy crashed", self.help_text())

    def mounts(self, *entries: tuple[str, str]) -> str:
        """A fake /data with mounts (name, options) and a mountinfo naming
        them among others; returns the fake root."""
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = os.path.join(tmp.name, "data")
        lines = ["22 1 0:21 / / ro,relatime - overlay overlay ro", "23 22 0:5 / /tmp rw,nosuid,nodev,noexec - tmpfs tmpfs rw"]
        for n, (name, opts) in enumerate(entries):
            path = os.path.join(root, name)
            os.makedirs(path)
            for f in ("b.csv", "a.csv", "c.txt", "d.txt", "e.txt")[: n + 1]:
                open(os.path.join(path, f), "w").close()
            os.mkdir(os.path.join(path, "sub"))
            esc = chr(92) + "040"  # mountinfo's escape of a space
            lines.append(f"{30 + n} 22 8:1 /srv/{name.replace(' ', esc)} {path.replace(' ', esc)} {opts} - ext4 /dev/sda1 rw")
        info = os.path.join(tmp.name, "mountinfo")
        with open(info, "w") as f:
            f.write("\n".join(lines) + "\n")
        patches = [mock.patch.object(_help, "_MOUNTINFO", info), mock.patch.object(_help, "_DATA_ROOT", root)]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        return root

    def test_fresh_container(self) -> None:
        with mock.patch.dict(os.environ, {"BRIDGE_VARIANT": "slim"}):
            text = self.help_text()
        self.assertIn("in a fresh container", text)
        self.assertIn("image slim.", text)
        self.assertIn("Nothing is kept between calls.", text)
        self.assertIn("timeout\n  kills the container", text)
        self.assertNotIn("session", text)
        self.assertIn("- Mounted folders: none.", text)
        self.assertIn("display(x, ...)", text)
        self.assertIn("plt.show()", text)
        self.assertIn("/tmp/outputs", text)

    def test_in_a_session(self) -> None:
        sys.modules["_bridge_relay"].session = True
        text = self.help_text()
        self.assertIn("in a session's container", text)
        self.assertNotIn("Nothing is kept", text)
        flat = " ".join(text.split())
        self.assertIn("earlier calls' variables, imports and /tmp files are here", flat)
        self.assertIn("sent files of /tmp/outputs come back only if changed", flat)
        self.assertIn("inputs in /tmp/inputs (read-only)", flat)
        self.assertIn("A snapshot keeps /tmp files only: a session restored from one has them, not the variables.", flat)
        sys.modules["_bridge_relay"].memory_snapshots = True
        try:
            flat = " ".join(self.help_text().split())
        finally:
            sys.modules["_bridge_relay"].memory_snapshots = False
        self.assertIn("A snapshot keeps it all (gVisor): variables, imports, threads and /tmp; not a tool call under way.", flat)
        self.assertNotIn("/tmp files only", flat)
        self.assertIn("raises KeyboardInterrupt: code that stops within 3 s keeps the session and its state", flat)
        self.assertIn("killed with its container and the state is lost", flat)

    def test_as_a_script(self) -> None:
        # bridge run: no last value, no figures left open, files only with --outputs.
        self.assertIn("the last line's expression is shown", " ".join(self.help_text().split()))
        sys.modules["_bridge_relay"].script = True
        flat = " ".join(self.help_text().split())
        self.assertNotIn("the last line's expression is shown", flat)
        self.assertIn("A script, as python3 runs it: the last line's value is not shown, nor are figures left open", flat)
        self.assertIn("kept only if bridge run was given --outputs", flat)

    def test_mounts_listed(self) -> None:
        root = self.mounts(("sales", "ro,nosuid,nodev,noexec,relatime"), ("my reports", "rw,nosuid"))
        text = self.help_text()
        self.assertIn("- Mounted folders, from the operator:", text)
        self.assertIn(f"    {root}/my reports (writable), 3 entries: a.csv, b.csv, sub/\n", text)
        self.assertIn(f"    {root}/sales (read-only), 2 entries: b.csv, sub/\n", text)

    def test_many_mounts_stay_one_screen(self) -> None:
        sys.modules["_bridge_relay"].session = True
        self.relay.servers = [{"name": f"server-number-{n}", "description": "", "module": f"server_number_{n}"} for n in range(200)]
        root = self.mounts(*[(f"m{n}", "ro") for n in range(5)], ("m5", "ro"), ("m6", "ro"))
        text = self.help_text()
        self.assertIn(f"    {root}/m4 (read-only), 6 entries: a.csv, b.csv, c.txt, d.txt, ...\n", text)
        self.assertIn(f"    ... and 2 more under {root}\n", text)
        self.assertLessEqual(len(text.splitlines()), 50)
        self.assertLessEqual(max(len(line) for line in text.splitlines()), 100)

    def test_packages(self) -> None:
        import importlib.util

        real = importlib.util.find_spec
        with mock.patch.object(importlib.util, "find_spec", lambda name, *a: object() if name in ("numpy", "pandas") else real("no_such_module_x")):
            text = self.help_text()
        self.assertIn("- Packages: numpy, pandas and the standard library; no pip. Not here: matplotlib,", " ".join(text.split()))
        with mock.patch.object(importlib.util, "find_spec", lambda name, *a: None):
            text = self.help_text()
        self.assertIn("- Packages: Python's standard library only (no numpy, pandas, matplotlib, scipy...); no pip.", " ".join(text.split()))


if __name__ == "__main__":
    unittest.main()


class ReviewFixesTest(unittest.TestCase):
    """Names and entry points a review found broken."""

    def setUp(self) -> None:
        reset()

    def tearDown(self) -> None:
        reset()

    def test_dunder_tool_names(self) -> None:
        relay = FakeRelay(
            [{"name": "d", "description": "", "module": "d"}],
            {"d": [{"name": "__class__", "description": "x", "input_schema": {"type": "object"}},
                   {"name": "__dict__", "description": "y", "input_schema": {"type": "object"}}]},
        )
        sys.modules["_bridge_relay"] = relay.module()
        m = importlib.import_module("mcp_tools.d")
        self.assertEqual(sorted(m.__all__), ["_class__", "_dict__"])
        self.assertEqual(m._class__.tool, "__class__")

    def test_help_on_an_object(self) -> None:
        import io
        from contextlib import redirect_stdout

        out = io.StringIO()
        with redirect_stdout(out):
            mcp_tools.help(len)
        self.assertIn("len", out.getvalue())
        self.assertNotIn("bridge sandbox", out.getvalue())

    def test_forked_child_gets_tools_unavailable(self) -> None:
        relay = FakeRelay([{"name": "d", "description": "", "module": "d"}], {"d": []})
        sys.modules["_bridge_relay"] = relay.module()
        pid = os.fork()
        if pid == 0:
            try:
                mcp_tools.call("d", "x")
            except mcp_tools.ToolsUnavailableError as e:
                os._exit(0 if "forked" in str(e) else 2)
            except BaseException:
                os._exit(3)
            os._exit(4)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)


# A 1x1 orange PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC")


def fake_class(module: str, name: str, **attrs: Any) -> type:
    """A class that looks, to show(), like module.name."""
    return type(name, (), {"__module__": module, **attrs})


class FakeFigure:
    """Saves its own name, as matplotlib's Figure.savefig would save a PNG."""

    def savefig(self, path: str, format: str | None = None, **kwargs: Any) -> None:
        with open(path, "wb") as f:
            f.write(PNG if format == "png" else format.encode())


FakeFigure.__module__ = "matplotlib.figure"
FakeFigure.__name__ = FakeFigure.__qualname__ = "Figure"


class FakeIloc:
    def __init__(self, frame: "FakeFrame") -> None:
        self.frame = frame

    def __getitem__(self, key: Any) -> Any:
        if self.frame.series:
            return self.frame.data[key][0]
        i, j = key
        return self.frame.data[i][j]


class FakeIndex(list):
    name = None


class FakeFrame:
    """Enough of a pandas DataFrame (or, with series, a Series) for markdown_table."""

    def __init__(self, data: list[list[Any]], columns: list[Any], index: list[Any] | None = None, index_name: Any = None, series: bool = False, name: Any = None) -> None:
        self.data = data
        self.columns = columns
        self.index = FakeIndex(index if index is not None else range(len(data)))
        self.index.name = index_name
        self.series = series
        self.name = name
        self.shape = (len(data),) if series else (len(data), len(columns))
        self.iloc = FakeIloc(self)


class ShowTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "outputs")
        self.env = mock.patch.dict(os.environ, {"BRIDGE_OUTPUTS": self.out})
        self.env.start()
        _show._counters.clear()

    def tearDown(self) -> None:
        self.env.stop()
        self.tmp.cleanup()

    def printed(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            got = mcp_tools.show(*args, **kwargs)
        return got, out.getvalue()

    def test_importable_and_public(self) -> None:
        from mcp_tools import show

        self.assertIs(show, mcp_tools.show)
        self.assertIn("show", mcp_tools.__all__)
        self.assertIn("show", _core.RESERVED)

    def test_import_loads_no_data_library(self) -> None:
        import subprocess

        code = (
            "import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).with_name('lib'))!r})\n"
            "import mcp_tools\n"
            "from mcp_tools import show\n"
            "print([m for m in ('numpy', 'pandas', 'matplotlib', 'PIL') if m in sys.modules])\n"
        )
        out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout, "[]\n", out.stderr)

    def test_image_bytes_by_signature(self) -> None:
        cases = [
            (PNG, ".png"),
            (b"\xff\xd8\xff\xe0" + b"\0" * 20, ".jpg"),
            (b"GIF89a" + b"\0" * 20, ".gif"),
            (b"GIF87a" + b"\0" * 20, ".gif"),
            (b"RIFF\x10\0\0\0WEBPVP8 " + b"\0" * 8, ".webp"),
        ]
        for n, (data, ext) in enumerate(cases, 1):
            for kind in (bytes, bytearray, memoryview):
                with self.subTest(ext=ext, kind=kind.__name__):
                    path, printed = self.printed(kind(data))
                    self.assertEqual(printed, "")
                    self.assertEqual(os.path.dirname(path), self.out)
                    self.assertTrue(path.endswith(ext), path)
                    with open(path, "rb") as f:
                        self.assertEqual(f.read(), data)
        self.assertEqual(sorted(os.listdir(self.out))[:3], ["image-1.png", "image-10.gif", "image-11.gif"])

    def test_other_bytes_and_objects_are_printed(self) -> None:
        for obj in ({"a": 1}, [1, 2], "text", 3.5, None, b"not an image", b"RIFF1234WAVE"):
            with self.subTest(obj=obj):
                got, printed = self.printed(obj)
                self.assertIsNone(got)
                self.assertEqual(printed, f"{obj}\n")
        self.assertFalse(os.path.exists(self.out) and os.listdir(self.out))

    def test_figure_naming(self) -> None:
        fig = FakeFigure()
        first, _ = self.printed(fig)
        self.assertEqual(first, os.path.join(self.out, "figure-1.png"))
        with open(os.path.join(self.out, "figure-2.png"), "w") as f:
            f.write("the code's own file")  # a fresh name skips it
        second, _ = self.printed(fig)
        self.assertEqual(second, os.path.join(self.out, "figure-3.png"))
        with open(os.path.join(self.out, "figure-2.png")) as f:
            self.assertEqual(f.read(), "the code's own file")
        named, _ = self.printed(fig, name="chart")
        self.assertEqual(named, os.path.join(self.out, "chart.png"))
        svg, _ = self.printed(fig, name="chart.svg")
        with open(svg, "rb") as f:
            self.assertEqual(f.read(), b"svg")
        with open(first, "rb") as f:
            self.assertEqual(f.read(), PNG)
        for bad in ("../x.png", "a/b", "", ".."):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                mcp_tools.show(fig, name=bad)

    def test_axes_and_pyplot_lead_to_the_figure(self) -> None:
        fig = FakeFigure()
        Axes = fake_class("matplotlib.axes._axes", "Axes")
        ax = Axes()
        ax.figure = fig
        self.assertTrue(self.printed(ax)[0].endswith("figure-1.png"))
        pyplot = types.ModuleType("matplotlib.pyplot")
        pyplot.gcf = lambda: fig
        with mock.patch.dict(sys.modules, {"matplotlib.pyplot": pyplot}):
            self.assertTrue(self.printed(pyplot)[0].endswith("figure-2.png"))

    def test_failed_save_leaves_no_file(self) -> None:
        class Broken(FakeFigure):
            def savefig(self, path: str, format: str | None = None, **kwargs: Any) -> None:
                raise RuntimeError("no backend")

        Broken.__module__ = "matplotlib.figure"
        with self.assertRaises(RuntimeError):
            mcp_tools.show(Broken())
        self.assertEqual(os.listdir(self.out), [])

    def test_pil_image(self) -> None:
        saved = []

        def save(self: Any, path: str, format: str) -> None:
            saved.append((self.mode, format))
            with open(path, "wb") as f:
                f.write(PNG)

        Image = fake_class("PIL.Image", "Image", save=save, mode="RGB")
        PngImageFile = type("PngImageFile", (Image,), {"__module__": "PIL.PngImagePlugin"})
        path, _ = self.printed(PngImageFile())
        self.assertEqual(path, os.path.join(self.out, "image-1.png"))
        self.assertEqual(saved, [("RGB", "PNG")])

    def test_markdown_table(self) -> None:
        frame = FakeFrame([[1, 2.5, "a|b"], [2, float("nan"), "x\ny"], [3, 3.0, None]], ["n", "f", "s"], index_name="id")
        self.assertEqual(
            _show.markdown_table(frame),
            "| id | n | f | s |\n"
            "| --- | ---: | ---: | --- |\n"
            "| 0 | 1 | 2.5 | a\\|b |\n"
            "| 1 | 2 | NaN | x y |\n"
            "| 2 | 3 | 3.0 | None |",
        )

    def test_markdown_table_cuts_rows_and_columns(self) -> None:
        frame = FakeFrame([[r * 100 + c for c in range(30)] for r in range(50)], [f"c{c}" for c in range(30)])
        lines = _show.markdown_table(frame, max_rows=4, max_cols=5).splitlines()
        self.assertEqual(lines[0], "|  | c0 | c1 | c2 | … | c28 | c29 |")
        self.assertEqual(lines[2], "| 0 | 0 | 1 | 2 | … | 28 | 29 |")
        self.assertEqual(lines[4], "| … | … | … | … | … | … | … |")
        self.assertEqual(lines[6], "| 49 | 4900 | 4901 | 4902 | … | 4928 | 4929 |")
        self.assertEqual(lines[-1], "(DataFrame of 50 rows × 30 columns; showing the first 2 and last 2 rows and the first 3 and last 2 columns)")
        self.assertEqual(len(lines), 2 + 5 + 1)
        defaults = _show.markdown_table(frame).splitlines()
        self.assertEqual(len(defaults), 2 + 21 + 1)
        self.assertEqual(defaults[0].count("|"), 1 + 13 + 1)

    def test_markdown_series_and_long_cells(self) -> None:
        series = FakeFrame([["x" * 100], [True]], [], index=["a", "b"], series=True, name="s")
        self.assertEqual(
            _show.markdown_table(series),
            "|  | s |\n| --- | --- |\n| a | " + "x" * 39 + "… |\n| b | True |",
        )

    def test_dataframe_is_printed_as_markdown(self) -> None:
        try:
            import pandas as pd
        except ImportError:
            self.skipTest("pandas is not installed")
        df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
        got, printed = self.printed(df)
        self.assertIsNone(got)
        self.assertEqual(printed, "|  | a | b |\n| --- | ---: | --- |\n| 0 | 1 | x |\n| 1 | 2 | y |\n")
        _, printed = self.printed(pd.DataFrame({"v": range(100)}), max_rows=6)
        self.assertIn("| … | … |", printed)
        self.assertIn("showing the first 3 and last 3 rows", printed)

    def test_real_matplotlib_figure(self) -> None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.skipTest("matplotlib is not installed")
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3])
        path = mcp_tools.show(ax)
        with open(path, "rb") as f:
            self.assertEqual(_show.image_type(f.read(16)), ".png")
        plt.close(fig)


class SkillRelay(FakeRelay):
    """FakeRelay with a skills folder in memory, checked as the bridge
    would check it (only the parts these tests need)."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[str, dict] = {}
        self.save_error: RelayError | None = None

    def query(self, op: str, args: dict | None = None) -> Any:
        if op == "save_skill":
            self.queries.append((op, args))
            if self.save_error is not None:
                raise self.save_error
            if args["name"] in self.saved and not args["overwrite"]:
                raise RelayError("skill_exists", f"a skill of that name exists: {args['name']!r} (pass overwrite=True to replace it)")
            replaced = args["name"] in self.saved
            self.saved[args["name"]] = dict(args, saved="2026-11-24T10:00:00Z")
            return {"name": args["name"], "bytes": len(args["source"]), "replaced": replaced}
        if op == "skills":
            self.queries.append((op, args))
            return [{k: v for k, v in s.items() if k != "source" and k != "overwrite"} for _, s in sorted(self.saved.items())]
        if op == "skill_source":
            self.queries.append((op, args))
            if args["name"] not in self.saved:
                raise RelayError("unknown_skill", f"no skill is named {args['name']!r}: mcp_tools.skills() lists the skills there are")
            return {k: v for k, v in self.saved[args["name"]].items() if k != "overwrite"}
        return super().query(op, args)


def define(source: str, filename: str = "<code>") -> dict:
    """Runs source as the runner runs the code: in a __main__ module that is
    sys.modules["__main__"] (SkillsTest puts the real one back), its lines
    in linecache under the code's name."""
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    main = sys.modules["__main__"]
    if getattr(main, "__bridge_test_main__", False) is False:
        main = types.ModuleType("__main__")
        main.__bridge_test_main__ = True
        sys.modules["__main__"] = main
    exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)
    return main.__dict__


class SkillsTest(Base):
    def setUp(self) -> None:
        super().setUp()
        self.relay = SkillRelay()
        sys.modules["_bridge_relay"] = self.relay.module()
        self._main = sys.modules["__main__"]
        for name in [n for n in sys.modules if n.startswith("skills.")]:
            del sys.modules[name]

    def tearDown(self) -> None:
        sys.modules["__main__"] = self._main
        super().tearDown()

    def saves(self) -> list:
        return [a for op, a in self.relay.queries if op == "save_skill"]

    def test_function_saved_with_what_it_uses(self) -> None:
        ns = define(
            "import json\n"
            "import os.path as osp\n"
            "from textwrap import shorten\n"
            "import mcp_tools\n"
            "from mcp_tools.server_everything import echo\n"
            "LIMIT = 3\n"
            "NAMES = ('a', 'b')\n"
            "big_local_table = object()  # not used by the skill: not carried\n"
            "def helper(x):\n"
            "    return shorten(x, 20)\n"
            "\n"
            "def summarize(text, n=LIMIT) -> str:\n"
            "    '''Sums things up.'''\n"
            "    big_local_table = [1, 2]\n"
            "    r = mcp_tools.call('everything', 'echo', message=text)\n"
            "    echo(message='x')\n"
            "    return json.dumps([helper(r), osp.basename('/a/b'), n, NAMES, len(big_local_table)])\n"
        )
        got = mcp_tools.save_skill("summarize", ns["summarize"], description="Sums a text up")
        self.assertEqual(got["signature"], "(text, n=LIMIT) -> str")
        self.assertEqual(got["servers"], ["everything", "server-everything"])
        self.assertFalse(got["replaced"])
        [sent] = self.saves()
        src = sent["source"]
        self.assertEqual(sent["description"], "Sums a text up")
        for line in ("import json", "import posixpath as osp", "from textwrap import shorten", "import mcp_tools", "LIMIT = 3", "NAMES = ('a', 'b')", "def helper(x):", "def summarize("):
            self.assertIn(line, src)
        self.assertNotIn("object()", src)
        self.assertLess(src.index("def helper"), src.index("def summarize"))
        # The module it makes works on its own, in a fresh namespace.
        from skills import summarize

        self.assertEqual(json_loads(summarize("hello")), ['Echo: hello', "b", 3, ["a", "b"], 2])
        self.assertEqual(summarize.__module__, "skills.summarize")
        self.assertIn("Sums things up", inspect.getsource(summarize))

    def test_saved_under_another_name(self) -> None:
        ns = define("def _double(x):\n    return 2 * x\n")
        got = mcp_tools.save_skill("double_it", ns["_double"])
        self.assertEqual(got["signature"], "(x)")
        self.assertTrue(self.saves()[0]["source"].endswith("\ndouble_it = _double\n"))
        from skills import double_it

        self.assertEqual(double_it(21), 42)

    def test_module_source_and_module_import(self) -> None:
        mcp_tools.save_skill("textkit", "def words(s):\n    return s.split()\n\ndef count(s):\n    return len(words(s))\n")
        self.assertEqual(self.saves()[0]["signature"], "")
        import skills

        kit = skills.textkit
        self.assertIsInstance(kit, types.ModuleType)
        self.assertEqual(kit.count("a b c"), 3)
        # Read once per interpreter.
        self.assertIs(skills.textkit, kit)
        self.assertEqual(sum(1 for op, _ in self.relay.queries if op == "skill_source"), 1)
        # Saving again makes the next import read it again.
        mcp_tools.save_skill("textkit", "def count(s):\n    return -1\n", overwrite=True)
        self.assertEqual(skills.textkit.count("a b"), -1)

    def test_refused_before_sending(self) -> None:
        ns = define(
            "import threading\n"
            "lock = threading.Lock()\n"
            "def locked():\n"
            "    with lock:\n"
            "        return 1\n"
            "def outer():\n"
            "    y = 1\n"
            "    def inner():\n"
            "        return y\n"
            "    return inner\n"
        )
        cases = [
            (lambda: mcp_tools.save_skill("l", lambda x: x), "not a lambda"),
            (lambda: mcp_tools.save_skill("locked", ns["locked"]), "uses the global 'lock'"),
            (lambda: mcp_tools.save_skill("inner", ns["outer"]()), "inside another function"),
            (lambda: mcp_tools.save_skill("broken", "def f(:\n"), "does not compile (line 1)"),
            (lambda: mcp_tools.save_skill("../x", "x = 1"), "not valid"),
            (lambda: mcp_tools.save_skill("", "x = 1"), "not valid"),
            (lambda: mcp_tools.save_skill("a" * 300, "x = 1"), "not valid"),
            (lambda: mcp_tools.save_skill("len_", len), "not builtin_function_or_method"),
            (lambda: mcp_tools.save_skill("print", "x = 1"), "taken by a Python built-in"),
            (lambda: mcp_tools.save_skill("json", "x = 1"), "taken by a module of Python's standard library"),
            (lambda: mcp_tools.save_skill("mcp_tools", "x = 1"), "taken by the installed module mcp_tools"),
        ]
        for call, want in cases:
            with self.subTest(want=want):
                with self.assertRaises((mcp_tools.SkillError, TypeError)) as cm:
                    call()
                self.assertIn(want.replace("not builtin", "builtin"), str(cm.exception))
        self.assertEqual(self.saves(), [])

    def test_bridge_refusals_raise_skill_error(self) -> None:
        self.relay.save_error = RelayError("denied", "skills cannot be saved here: the policy turns saving off (skills.save: false)")
        with self.assertRaises(mcp_tools.SkillError) as cm:
            mcp_tools.save_skill("fine", "x = 1\n")
        self.assertEqual(cm.exception.type, "denied")
        self.assertIn("skills.save: false", str(cm.exception))
        self.relay.save_error = None
        mcp_tools.save_skill("fine", "x = 1\n")
        with self.assertRaises(mcp_tools.SkillError) as cm:
            mcp_tools.save_skill("fine", "x = 2\n")
        self.assertEqual(cm.exception.type, "skill_exists")

    def test_unknown_skill_is_an_import_error(self) -> None:
        with self.assertRaises(ImportError) as cm:
            from skills import nothing_here  # noqa: F401
        self.assertIn("no skill is named 'nothing_here'", str(cm.exception))
        import skills

        self.assertFalse(hasattr(skills, "__wrapped__"))
        self.assertFalse(hasattr(skills, "Bad"))

    def test_traceback_shows_the_skills_lines(self) -> None:
        mcp_tools.save_skill("boom", "def boom():\n    raise ValueError('from the skill')\n")
        from skills import boom

        try:
            boom()
        except ValueError as e:
            import traceback

            text = "".join(traceback.format_exception(e))
        self.assertIn('File "<skill boom>", line 2, in boom', text)
        self.assertIn("raise ValueError('from the skill')", text)

    def test_listing_and_search(self) -> None:
        mcp_tools.save_skill("top_repos", "def top_repos(n=5):\n    return n\n", description="The n most starred repositories.")
        got = mcp_tools.skills()
        self.assertEqual(
            got,
            [{"name": "top_repos", "description": "The n most starred repositories.", "signature": "(n=5)", "servers": [],
              "saved": "2026-11-24T10:00:00Z", "import": "from skills import top_repos"}],
        )
        self.relay.search_results = [
            {"skill": "top_repos", "description": "The n most starred repositories. More.", "signature": "(n=5)", "score": 2.5},
            {"server": "everything", "tool": "echo", "description": "Echoes", "params": ["message"], "score": 1.0},
        ]
        hits = mcp_tools.search("starred repositories")
        self.assertEqual(hits[0], {"skill": "top_repos", "description": "The n most starred repositories.", "signature": "(n=5)",
                                   "import": "from skills import top_repos", "score": 2.5})
        self.assertEqual(hits[1]["tool"], "echo")


class SkillsCarryTest(SkillsTest):
    """What a saved function carries, in the cases that are easy to get wrong."""

    def test_classes_of_the_code(self) -> None:
        ns = define(
            "from dataclasses import dataclass\n"
            "@dataclass\n"
            "class Point:\n"
            "    x: int\n"
            "    y: int\n"
            "class Box:\n"
            "    def __init__(self, p):\n"
            "        self.p = p\n"
            "    def area(self):\n"
            "        return self.p.x * self.p.y\n"
            "def area(x, y):\n"
            "    return Box(Point(x, y)).area()\n"
        )
        mcp_tools.save_skill("area", ns["area"])
        src = self.saves()[0]["source"]
        self.assertIn("from dataclasses import dataclass", src)
        self.assertIn("@dataclass\nclass Point:", src)
        self.assertIn("class Box:", src)
        from skills import area

        self.assertEqual(area(3, 4), 12)

    def test_a_class_of_a_later_session_call(self) -> None:
        define("class Unit:\n    n = 1\n", "<code>")
        ns = define("class Unit:\n    n = 2\ndef unit():\n    return Unit.n\n", "<code 2>")
        mcp_tools.save_skill("unit", ns["unit"])
        from skills import unit

        self.assertEqual(unit(), 2)

    def test_a_skill_built_on_a_skill(self) -> None:
        mcp_tools.save_skill("base", "def _h(x):\n    return x + 1\ndef base(x):\n    return _h(x) * 2\n")
        ns = define("from skills import base\ndef twice(x):\n    return base(base(x))\n")
        mcp_tools.save_skill("twice", ns["twice"])
        self.assertIn("def _h(x):", self.saves()[1]["source"])
        forget_all()
        from skills import twice

        self.assertEqual(twice(1), 10)
        # A skill saved again under another name, with its helper.
        mcp_tools.save_skill("twice_again", twice)
        forget_all()
        from skills import twice_again

        self.assertEqual(twice_again(1), 10)
        # A skill module used as a global is refused, with what to do.
        mcp_tools.save_skill("kit", "def a():\n    return 1\n")
        ns = define("import skills\nfrom skills import kit\ndef uses_kit():\n    return kit.a()\n")
        with self.assertRaises(mcp_tools.SkillError) as cm:
            mcp_tools.save_skill("uses_kit", ns["uses_kit"])
        self.assertIn("import it inside the function (from skills import kit)", str(cm.exception))

    def test_the_name_may_not_be_a_carried_global(self) -> None:
        ns = define("import textwrap as tw\ndef helper(s):\n    return s\ndef work(s):\n    return helper(tw.dedent(s))\n")
        for name in ("helper", "tw"):
            with self.subTest(name=name):
                with self.assertRaises(mcp_tools.SkillError) as cm:
                    mcp_tools.save_skill(name, ns["work"])
                self.assertIn("also a global that work uses", str(cm.exception))
        self.assertEqual(self.saves(), [])

    def test_odd_globals(self) -> None:
        ns = define(
            "from __future__ import annotations\n"
            "import functools\n"
            "@functools.lru_cache\n"
            "def cached(x):\n"
            "    return x\n"
            "def me() -> SomeTypeNotDefined:\n"
            "    return __name__\n"
            "def uses_cached():\n"
            "    return cached(1)\n"
        )
        mcp_tools.save_skill("me", ns["me"], description="é" * 600)
        sent = self.saves()[0]
        self.assertTrue(sent["source"].startswith("from __future__ import annotations\n"))
        self.assertNotIn("__name__ =", sent["source"])
        self.assertLessEqual(len(sent["description"].encode()), 1024)
        from skills import me

        self.assertEqual(me(), "skills.me")
        for fn, want in ((ns["cached"], "is decorated"), (ns["uses_cached"], "uses cached, which is decorated")):
            with self.assertRaises(mcp_tools.SkillError) as cm:
                mcp_tools.save_skill("odd", fn)
            self.assertIn(want, str(cm.exception))


def forget_all() -> None:
    """As a new run: no skill module loaded."""
    for name in [n for n in sys.modules if n.startswith("skills.")]:
        del sys.modules[name]


def json_loads(s: str) -> Any:
    import json

    return json.loads(s)
