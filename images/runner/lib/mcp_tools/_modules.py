"""mcp_tools.<module>: one MCP server's tools as Python functions.

_core.Finder sends the imports here. The server comes from the "servers"
query (by its module alias), its tools from the "tools" query; each tool
becomes a function whose signature and docstring come from the tool's
input schema. Imported only when code imports a server's module.
"""

import inspect
import json
from importlib.machinery import ModuleSpec

from . import _core


def find_spec(fullname, name):
    try:
        servers = _core.server_list()
    except _core.ToolsUnavailableError as e:
        raise ModuleNotFoundError(f"No module named {fullname!r}: {e.message}", name=fullname) from None
    for server in servers:
        if server["module"] == name:
            return ModuleSpec(fullname, Loader(server), origin=f"MCP server {server['name']!r}")
    modules = [s["module"] for s in servers]
    raise ModuleNotFoundError(
        f"No module named {fullname!r}: no connected MCP server has the module name {name!r}"
        f"{_core.did_you_mean(name, modules)} (mcp_tools.servers() lists them: {', '.join(modules) or 'none'})",
        name=fullname,
    )


class Loader:
    def __init__(self, server):
        self.server = server

    def create_module(self, spec):
        return None  # a plain module

    def exec_module(self, module):
        server = self.server["name"]
        entries = _core.tool_list(server)
        names = _core.function_names(entries)
        doc = [f"The tools of the MCP server {server!r} as functions."]
        if self.server["description"]:
            doc += ["", self.server["description"]]
        doc += [
            "",
            "Each function calls its tool and returns the decoded result (as",
            "mcp_tools.call does); fn.acall(...) is its awaitable twin. help(fn) shows",
            "the parameters; fn.server and fn.tool name the server and tool.",
        ]
        module.__doc__ = "\n".join(doc)
        module.__all__ = []
        for entry in entries:
            fn = make_function(server, module.__name__, entry, names[entry["name"]])
            setattr(module, fn.__name__, fn)
            module.__all__.append(fn.__name__)


# JSON Schema types as Python annotations.
_ANNOTATIONS = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def type_text(schema, depth=0):
    """A short description of a JSON Schema: "string", "array of integer",
    "one of "a", "b"", "string or null"..."""
    if not isinstance(schema, dict) or depth > 3:
        return "any"
    if isinstance(schema.get("enum"), list):
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    t = schema.get("type")
    if isinstance(t, list):
        return " or ".join(str(x) for x in t)
    if t == "array":
        items = schema.get("items")
        return f"array of {type_text(items, depth + 1)}" if isinstance(items, dict) and items else "array"
    if isinstance(t, str):
        return t
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(type_text(s, depth + 1) for s in schema[key])
    return "any"


def make_function(server, module_name, entry, name):
    """The function for one tool: named name, in module module_name."""
    tool = entry["name"]
    schema = entry.get("input_schema")
    if not isinstance(schema, dict):
        schema = {}
    props = schema.get("properties")
    if not isinstance(props, dict):
        props = {}
    required = schema.get("required")
    required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    # Required parameters come first, in the order of "required": a JSON
    # object's key order does not survive every hop between the server and
    # the sandbox, but an array's does. The optional ones follow, sorted, so
    # that their order never depends on the path the schema took.
    order = list(dict.fromkeys(required)) + sorted(p for p in props if p not in required)
    params = _core.aliases(order)  # parameter name -> property
    real = {}
    positional, keyword = [], []
    for prop in order:
        p = params[prop]
        real[p] = prop
        prop_schema = props.get(prop)
        t = prop_schema.get("type") if isinstance(prop_schema, dict) else None
        annotation = _ANNOTATIONS.get(t, inspect.Parameter.empty) if isinstance(t, str) else inspect.Parameter.empty
        if prop in required:
            positional.append(inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation))
        else:
            if annotation is not inspect.Parameter.empty:
                annotation = annotation | None
            keyword.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    # A schema that allows more properties than it lists takes them as keywords.
    extra = schema.get("additionalProperties")
    var_keyword = None
    if extra is True or (isinstance(extra, dict) and extra):
        var_keyword = "more"
        while var_keyword in real:
            var_keyword += "_"
        keyword.append(inspect.Parameter(var_keyword, inspect.Parameter.VAR_KEYWORD))
    signature = inspect.Signature(positional + keyword)

    def bind(args, kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}(): {e}") from None
        out = {}
        for p, value in bound.arguments.items():
            if p == var_keyword:
                out.update(value)
            elif value is None and signature.parameters[p].kind is inspect.Parameter.KEYWORD_ONLY:
                continue  # an optional parameter left out
            else:
                out[real[p]] = value
        return out

    def fn(*args, **kwargs):
        return _core.call(server, tool, bind(args, kwargs))

    async def acall(*args, **kwargs):
        return await _core.acall(server, tool, bind(args, kwargs))

    doc = docstring(server, entry, name, order, params, props, required, var_keyword)
    for f, fname in ((fn, name), (acall, f"{name}.acall")):
        f.__name__ = fname.rsplit(".", 1)[-1]
        f.__qualname__ = fname
        f.__module__ = module_name
        f.__signature__ = signature
        f.server = server
        f.tool = tool
    fn.__doc__ = doc
    acall.__doc__ = f"Awaitable {name}(): the same call, without blocking the event loop.\n\n{doc}"
    fn.acall = acall
    return fn


def docstring(server, entry, name, order, params, props, required, var_keyword):
    tool = entry["name"]
    description = (entry.get("description") or entry.get("title") or "").strip()
    lines = [description or f"The tool {tool!r} of the MCP server {server!r}."]
    if order or var_keyword:
        lines += ["", "Parameters:"]
        for prop in order:
            schema = props.get(prop) if isinstance(props.get(prop), dict) else {}
            label = params[prop] if params[prop] == prop else f"{params[prop]} (property {prop!r})"
            info = type_text(schema) + (", required" if prop in required else ", optional")
            if "default" in schema:
                info += f", default {json.dumps(schema['default'])}"
            text = schema.get("description")
            if isinstance(text, str) and text.strip():
                info += ": " + text.strip().replace("\n", "\n      ")
            lines.append(f"  {label}: {info}")
        if var_keyword:
            lines.append(f"  **{var_keyword}: further properties, passed as given")
    returns = _core.returns_of(entry)
    if returns:
        lines += ["", f"Returns: {returns}"]
    lines += [
        "",
        f"Calls the tool {tool!r} of the MCP server {server!r} and returns the decoded",
        f"result (see mcp_tools.call). `await {name}.acall(...)` does the same without blocking.",
    ]
    if entry.get("output_schema"):
        lines.append(f"Its output schema: mcp_tools.describe({server!r}, {tool!r})['output_schema'].")
    return "\n".join(lines)
