"""The MCP servers' resources: resources() lists them, read_resource(uri)
reads one, through the bridge and under its policy (each is one call of
the run's budget). The bridge sends a read's contents in base64, text or
not; here text becomes str and a blob bytes.
"""

import base64

from . import _core


def _server_arg(server):
    if server is not None and not isinstance(server, str):
        raise TypeError(f"server must be a string or None, not {type(server).__name__}")
    return server


def resources(server=None, templates=False):
    """The resources of server (of every server when None) that the policy
    lets the code read, in the servers' order: a list of {server, uri,
    name, mime, size?, title?, description?}; size is there only when the
    server gives it. With templates=True, the resource templates instead:
    {server, uri_template, name, mime, title?, description?}, RFC 6570
    templates whose URIs read_resource reads (fill in the {names}).
    Raises UnknownServerError for a server that is not connected and
    ToolDeniedError when the policy lets the code read none of its
    resources."""
    if type(templates) is not bool:
        raise TypeError(f"templates must be True or False, not {templates!r}")
    got = _core.ask("resources", {"server": _server_arg(server)}, server=server)
    key = "templates" if templates else "resources"
    entries = got.get(key) if isinstance(got, dict) else None
    if not isinstance(entries, list):
        raise _core.MCPToolsError(f"the bridge answered the resources query with {type(got).__name__}, not a listing", type="invalid")
    out = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("server"), str):
            continue
        item = {"server": e["server"]}
        if templates:
            item["uri_template"] = e.get("uri_template") or ""
        else:
            item["uri"] = e.get("uri") or ""
        item["name"] = e.get("name") or ""
        item["mime"] = e.get("mime")
        if not templates and isinstance(e.get("size"), int):
            item["size"] = e["size"]
        for k in ("title", "description"):
            if isinstance(e.get(k), str) and e[k]:
                item[k] = e[k]
        out.append(item)
    return out


def read_resource(uri, server=None):
    """Reads the resource uri, from server or, when None, from the one
    server that lists it (or has a template that matches it). Returns str
    for a text resource, bytes for a blob; a resource the server returns
    as several contents comes back as a list of them (str or bytes each, in
    the server's order). Raises UnknownResourceError when no server has
    it (or several do: pass server=), ToolDeniedError when the policy
    refuses it, LimitExceededError when it is larger than the policy's
    resources.max_bytes (or the run's call budget is spent)."""
    if not isinstance(uri, str):
        raise TypeError(f"uri must be a string, not {type(uri).__name__}")
    if not uri:
        raise ValueError("uri must not be empty: mcp_tools.resources() lists the URIs there are")
    got = _core.ask("read_resource", {"uri": uri, "server": _server_arg(server)}, server=server)
    contents = got.get("contents") if isinstance(got, dict) else None
    if not isinstance(contents, list):
        raise _core.MCPToolsError(f"the bridge answered the read of {uri!r} with {type(got).__name__}, not its contents", type="invalid")
    out = []
    for c in contents:
        data = base64.b64decode(c.get("data") or "") if isinstance(c, dict) else b""
        if isinstance(c, dict) and c.get("text") is True:
            out.append(data.decode("utf-8", errors="replace"))
        else:
            out.append(data)
    return out[0] if len(out) == 1 else out


for _obj in (resources, read_resource):
    _obj.__module__ = "mcp_tools"  # as tracebacks and help() name them
del _obj
