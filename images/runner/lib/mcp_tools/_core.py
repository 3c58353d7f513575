"""The implementation of mcp_tools: queries, calls, result decoding, errors
and aliases. The package's __init__ re-exports the public names; the
per-server modules are built in _modules, the manual is in _help, show()
in _show (_runner_files is the runner's, not the package's).

Standard library only. Start-up time matters: this module imports nothing
that the runner has not loaded already (json brings re along); the rest is
imported where it is needed.
"""

import json
import os
import re
import sys

# --- errors ----------------------------------------------------------------


class MCPToolsError(Exception):
    """A tool call or a question about the tools failed.

    Attributes: type (the bridge's error type, such as "unknown_tool"),
    message (why), server and tool (None where they do not apply)."""

    type = "error"

    def __init__(self, message, *, type=None, server=None, tool=None):
        super().__init__(message)  # only the message in args: it pickles, and OSError takes it as is
        self.message = message
        self.type = type if type is not None else self.__class__.type
        self.server = server
        self.tool = tool

    def __str__(self):
        return self.message


class ToolError(MCPToolsError):
    """The tool ran and reported an error (its result had isError: true).
    message joins the result's text content; result is the raw result."""

    type = "tool_error"

    def __init__(self, message, *, server=None, tool=None, result=None, type=None):
        super().__init__(message, type=type, server=server, tool=tool)
        self.result = result

    def __str__(self):
        if self.server is None or self.tool is None:
            return self.message
        return f"tool {self.tool!r} of MCP server {self.server!r} failed: {self.message}"


class UnknownServerError(MCPToolsError, LookupError):
    """No MCP server of that name is connected."""

    type = "unknown_server"


class UnknownToolError(MCPToolsError, LookupError):
    """The server has no tool of that name."""

    type = "unknown_tool"


class UpstreamError(MCPToolsError, ConnectionError):
    """The MCP server is down, crashed or broke the protocol."""

    type = "upstream"


class ToolTimeoutError(MCPToolsError, TimeoutError):
    """The call ran past its timeout."""

    type = "timeout"


class ToolDeniedError(MCPToolsError, PermissionError):
    """The bridge's policy does not allow this call."""

    type = "denied"


class LimitExceededError(MCPToolsError):
    """A limit was reached: the run's call budget, a rate limit, or the size of
    the arguments or the result (the message names which). The run goes on."""

    type = "limit"


class UnknownResourceError(MCPToolsError, LookupError):
    """No server has the resource read, or several do and no server was
    named (the message names them: pass server=...)."""

    type = "unknown_resource"


class ToolsUnavailableError(MCPToolsError):
    """No MCP servers are connected, this is not the bridge's sandbox, or
    this is a process the code forked (only the first process has the relay)."""

    type = "tools_unavailable"


# The relay's error types; any other type raises MCPToolsError itself.
_ERRORS = {
    cls.type: cls
    for cls in (
        UnknownServerError,
        UnknownToolError,
        UpstreamError,
        ToolTimeoutError,
        ToolDeniedError,
        LimitExceededError,
        ToolsUnavailableError,
        UnknownResourceError,
    )
}


def error(type, message, server=None, tool=None):
    """The exception for an error the bridge reported."""
    return _ERRORS.get(type, MCPToolsError)(message, type=type, server=server, tool=tool)


# --- names -----------------------------------------------------------------

# Python's keywords, the soft ones included except "_" (proxy/alias.go has
# the same list): an alias must never be one.
KEYWORDS = frozenset(
    "False None True and as assert async await break class continue def del elif else except "
    "finally for from global if import in is lambda nonlocal not or pass raise return try while "
    "with yield match case type".split()
)

PUBLIC = (
    "servers",
    "tools",
    "describe",
    "search",
    "call",
    "acall",
    "call_raw",
    "acall_raw",
    "help",
    "show",
    "save_skill",
    "skills",
    "resources",
    "read_resource",
    "SkillError",
    "MCPToolsError",
    "ToolError",
    "UnknownServerError",
    "UnknownToolError",
    "UpstreamError",
    "ToolTimeoutError",
    "ToolDeniedError",
    "LimitExceededError",
    "ToolsUnavailableError",
    "UnknownResourceError",
)

# Attributes every module may have; no tool function may take these names.
MODULE_DUNDERS = frozenset(
    "__all__ __builtins__ __cached__ __dir__ __doc__ __file__ __getattr__ __loader__ __name__ "
    "__package__ __path__ __spec__".split()
)

# Every attribute the mcp_tools package has or may get: a server's module
# alias must be none of them. The bridge computes module aliases with the
# same list (test_mcp_tools checks that it covers the package).
RESERVED = frozenset(PUBLIC) | MODULE_DUNDERS | {"_core", "_help", "_modules", "_resources", "_runner_files", "_show", "_skills", "_carry", "__pycache__"}


def alias(name, reserved=frozenset()):
    """Turns a server, tool or parameter name into a Python identifier:
    every character not in [A-Za-z0-9_] becomes "_"; "_" goes in front of
    an empty name or one that starts with a digit; "_" goes after it while
    it is a keyword or in reserved."""
    out = "".join(c if c == "_" or "0" <= c <= "9" or "a" <= c <= "z" or "A" <= c <= "Z" else "_" for c in name)
    if not out or "0" <= out[0] <= "9":
        out = "_" + out
    # A __dunder__ is Python's own (a module's __class__, __dict__...): it
    # loses its first "_" (__class__ -> _class__).
    if _is_dunder(out) and out not in reserved:
        out = out[1:]
    while out in KEYWORDS or out in reserved:
        out += "_"
    return out


def _is_dunder(name):
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def aliases(names, reserved=frozenset()):
    """Maps each of names to its alias, all distinct: a name that is its own
    alias keeps it; the others, in order, add "_" until no name before took it."""
    out = {}
    taken = set()
    for name in names:
        if name not in out and alias(name, reserved) == name:
            out[name] = name
            taken.add(name)
    for name in names:
        if name in out:
            continue
        a = alias(name, reserved)
        while a in taken:
            a = alias(a + "_", reserved)
        out[name] = a
        taken.add(a)
    return out


def did_you_mean(word, names):
    """ "; did you mean: a, b?" for the names close to word, or ""."""
    import difflib

    lowered = word.lower()
    close = [n for n in names if len(lowered) >= 3 and lowered in n.lower()]
    close += [n for n in difflib.get_close_matches(word, names, n=3, cutoff=0.5) if n not in close]
    return f"; did you mean: {', '.join(close[:3])}?" if close else ""


_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z0-9`\"'(])")


def summary(text, limit=100):
    """The first sentence or line of text, at most limit characters."""
    if not isinstance(text, str):
        return ""
    text = text.strip()
    first = text.split("\n", 1)[0]
    m = _SENTENCE_END.search(first)
    if m:
        first = first[: m.end()]
    first = " ".join(first.split())
    if len(first) > limit:
        cut = first[: limit - 3]
        if " " in cut[limit // 2 :]:
            cut = cut.rsplit(" ", 1)[0]
        first = cut.rstrip(" ,;:") + "..."
    return first


def _copy(value):
    """A deep copy of a JSON value, so callers cannot change the caches."""
    return json.loads(json.dumps(value))


# --- the relay -------------------------------------------------------------


_PID = os.getpid()


def relay():
    """The runner's _bridge_relay module."""
    try:
        import _bridge_relay
    except ImportError:
        raise ToolsUnavailableError(
            "mcp_tools reaches MCP servers only from code that the bridge runs in its "
            "sandbox (the run_python tool); this Python has no relay to a bridge"
        ) from None
    if os.getpid() != _PID:
        raise ToolsUnavailableError(
            "MCP tools can be called only from the process that runs the code, not from a "
            "process it forked (multiprocessing, os.fork): use threads or asyncio instead"
        )
    return _bridge_relay


def ask(op, args, server=None):
    r = relay()
    try:
        return r.query(op, args)
    except r.ToolError as e:
        raise error(e.type, e.message, server=server) from None


def _bad_answer(what, got):
    return MCPToolsError(f"the bridge answered {what} with {type(got).__name__}, not a list", type="invalid")


# Fetched once per run: the tools do not change while the code runs.
_servers = None  # [{name, description, module}] in the bridge's order
_tools = {}  # server name -> [tool as the bridge describes it]


def server_list():
    global _servers
    if _servers is None:
        got = ask("servers", {})
        if not isinstance(got, list):
            raise _bad_answer("the servers query", got)
        entries = []
        for s in got:
            if isinstance(s, dict) and isinstance(s.get("name"), str):
                name = s["name"]
                module = s.get("module")
                if not isinstance(module, str) or not module:
                    module = alias(name, RESERVED)
                description = s.get("description")
                entries.append({"name": name, "description": description if isinstance(description, str) else "", "module": module})
        _servers = entries
    return _servers


def tool_list(server):
    if not isinstance(server, str):
        raise TypeError(f"server must be a string, not {type(server).__name__}")
    got = _tools.get(server)
    if got is None:
        got = ask("tools", {"server": server}, server=server)
        if not isinstance(got, list):
            raise _bad_answer(f"the tools query for {server!r}", got)
        got = [t for t in got if isinstance(t, dict) and isinstance(t.get("name"), str)]
        _tools[server] = got
    return got


def function_names(tool_entries):
    """Maps a server's tool names to the names of their functions."""
    return aliases([t["name"] for t in tool_entries], MODULE_DUNDERS)


def module_of(server):
    for s in server_list():
        if s["name"] == server:
            return s["module"]
    return alias(server, RESERVED)


# --- the public functions --------------------------------------------------


def servers():
    """The connected MCP servers, in the bridge's order: a list of
    {name, description, module}, where module is the name to import the
    server's tools by (import mcp_tools.<module>)."""
    return [dict(s) for s in server_list()]


def tools(server):
    """A server's tools: a list of {name, summary}, summary being the first
    sentence of the tool's description. describe() tells the rest."""
    return [{"name": t["name"], "summary": summary(t.get("description") or t.get("title") or "")} for t in tool_list(server)]


def describe(server, tool):
    """Everything about one tool: a dict {server, name, title, description,
    input_schema, output_schema, returns, annotations, module_function}.
    returns is the shape of the tool's result in brief, from its output
    schema, such as "{items: [{id: int, tags?: [str]}], total: int}" ("?":
    optional), or None when it has none. tool may also be the tool's
    function name (its Python alias)."""
    if not isinstance(tool, str):
        raise TypeError(f"tool must be a string, not {type(tool).__name__}")
    entries = tool_list(server)
    names = function_names(entries)
    found = next((t for t in entries if t["name"] == tool), None)
    if found is None:
        found = next((t for t in entries if names[t["name"]] == tool), None)
    if found is None:
        hint = did_you_mean(tool, [t["name"] for t in entries])
        raise UnknownToolError(
            f"server {json.dumps(server)} has no tool {json.dumps(tool)}{hint} (mcp_tools.tools({server!r}) lists them)",
            server=server,
            tool=tool,
        )
    schema = found.get("input_schema")
    return {
        "server": server,
        "name": found["name"],
        "title": found.get("title"),
        "description": found.get("description") or "",
        "input_schema": _copy(schema) if isinstance(schema, dict) else {"type": "object"},
        "output_schema": _copy(found.get("output_schema")),
        "returns": returns_of(found),
        "annotations": _copy(found.get("annotations")),
        "module_function": f"mcp_tools.{module_of(server)}.{names[found['name']]}",
    }


def returns_of(entry):
    """The shape of a tool's result, as the bridge sent it with the tool or
    search hit (entry), or None."""
    r = entry.get("returns")
    return r if isinstance(r, str) and r else None


def search(query, limit=5):
    """The tools and saved skills that best match query (words saying what
    you want to do), best first: a list of {server, tool, description,
    params, returns?, score} for a tool, {skill, description, signature,
    import, score} for a skill; description is one line, params the
    parameter names, returns the shape of the result (as describe() has
    it), there only for a tool with an output schema."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, not {type(query).__name__}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    got = ask("search", {"query": query, "limit": limit})
    if not isinstance(got, list):
        raise _bad_answer("the search query", got)
    out = []
    for r in got:
        if not isinstance(r, dict):
            continue
        if isinstance(r.get("skill"), str):
            out.append(
                {
                    "skill": r["skill"],
                    "description": summary(r.get("description")),
                    "signature": r.get("signature") or "",
                    "import": f"from skills import {r['skill']}",
                    "score": r.get("score"),
                }
            )
            continue
        hit = {
            "server": r.get("server"),
            "tool": r.get("tool"),
            "description": summary(r.get("description")),
            "params": list(r.get("params") or []),
        }
        returns = returns_of(r)
        if returns is not None:
            hit["returns"] = returns
        hit["score"] = r.get("score")
        out.append(hit)
    return out


def merge_arguments(args, kwargs):
    """The tool's arguments from call()'s dict and keywords."""
    if args is None:
        merged = {}
    elif isinstance(args, dict):
        merged = dict(args)
    elif hasattr(args, "keys"):
        merged = dict(args)  # any mapping
    else:
        raise TypeError(f"tool arguments must be a dict, not {type(args).__name__}")
    both = merged.keys() & kwargs.keys()
    if both:
        raise TypeError(f"argument {sorted(both)[0]!r} given both in the arguments dict and as a keyword")
    merged.update(kwargs)
    return merged


def call_raw(server, tool, arguments=None, /, **kwargs):
    """Calls a tool and returns its raw MCP CallToolResult, a dict
    {content, structuredContent?, isError?}, even when isError is true.
    Arguments come as a dict, as keywords, or both."""
    args = merge_arguments(arguments, kwargs)
    r = relay()
    try:
        return r.call_tool(server, tool, args)
    except r.ToolError as e:
        raise error(e.type, e.message, server, tool) from None


async def acall_raw(server, tool, arguments=None, /, **kwargs):
    """call_raw, awaitable: the event loop goes on while the tool works."""
    args = merge_arguments(arguments, kwargs)
    r = relay()
    try:
        return await r.acall_tool(server, tool, args)
    except r.ToolError as e:
        raise error(e.type, e.message, server, tool) from None


def call(server, tool, arguments=None, /, **kwargs):
    """Calls a tool and returns its decoded result: structuredContent if the
    result has one; else None for no content, the decoded item for one, a
    list for several (a text item is json.loads(text) if that parses, else
    the text; other items stay dicts). Raises ToolError if the tool fails.
    Arguments come as a dict, as keywords, or both."""
    return decode(server, tool, call_raw(server, tool, arguments, **kwargs))


async def acall(server, tool, arguments=None, /, **kwargs):
    """call, awaitable: run many at once with asyncio.gather."""
    return decode(server, tool, await acall_raw(server, tool, arguments, **kwargs))


# --- results ---------------------------------------------------------------


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # made once: json.loads with options makes one a call

# The first characters a JSON text may start with (after white space); a
# text that starts otherwise ("Echo: hi") is not tried.
_JSON_START = frozenset('{["-0123456789tfn')


def decode_item(item):
    if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
        text = item["text"]
        first = text[:1] if text[:1] not in " \t\n\r" else text.lstrip(" \t\n\r")[:1]
        if first not in _JSON_START:
            return text
        try:
            return _DECODER.decode(text)
        except (ValueError, RecursionError):
            return text
    return item


def decode(server, tool, result):
    if not isinstance(result, dict):
        return result
    content = result.get("content")
    if not isinstance(content, list):
        content = []
    if result.get("isError"):
        texts = [c["text"] for c in content if isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)]
        message = "\n".join(texts) or "the tool reported an error without saying why"
        raise ToolError(message, server=server, tool=tool, result=result)
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    items = [decode_item(c) for c in content]
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    return items


# --- per-server modules ----------------------------------------------------


class Finder:
    """A meta path finder for mcp_tools.<module>: the tools of the MCP server
    whose module alias that is, as functions (built in _modules)."""

    mcp_tools_finder = True

    def find_spec(self, fullname, path=None, target=None):
        package, dot, name = fullname.partition(".")
        if package != "mcp_tools" or not dot or "." in name or name in RESERVED:
            return None
        from . import _modules

        return _modules.find_spec(fullname, name)

    def invalidate_caches(self):
        pass


def install_finder():
    """Puts one Finder last on sys.meta_path (after the path finder, so the
    package's own files are found as usual)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "mcp_tools_finder", False)]
    sys.meta_path.append(Finder())


def _is_module_name(name):
    """Whether a server's module is called name (asks only once servers are known)."""
    if _servers is None:
        return False
    return any(s["module"] == name for s in _servers)


def package_attribute(name):
    """mcp_tools.<module> without an import statement: imports it."""
    if name.startswith("__") or (name.startswith("_") and not name[1:2].isdigit() and not _is_module_name(name)):
        raise AttributeError(f"module 'mcp_tools' has no attribute {name!r}")
    import importlib

    fullname = "mcp_tools." + name
    try:
        return importlib.import_module(fullname)
    except ModuleNotFoundError as e:
        if e.name != fullname:
            raise
        raise AttributeError(f"module 'mcp_tools' has no attribute {name!r} ({e})") from None


for _obj in (
    MCPToolsError,
    ToolError,
    UnknownServerError,
    UnknownToolError,
    UpstreamError,
    ToolTimeoutError,
    ToolDeniedError,
    LimitExceededError,
    ToolsUnavailableError,
    UnknownResourceError,
    servers,
    tools,
    describe,
    search,
    call,
    acall,
    call_raw,
    acall_raw,
):
    _obj.__module__ = "mcp_tools"  # as tracebacks and help() name them
del _obj
