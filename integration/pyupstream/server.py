"""A small MCP server over stdio on Python's standard library alone, for the
benchmarks: most MCP servers people run are Node or Python processes, and
no Python MCP SDK is at hand here (Debian has no package of it and no
package index is reachable), so this speaks the protocol itself: newline-
delimited JSON-RPC 2.0, initialize, ping, tools/list and tools/call.

Tools: echo (its message back, as text and as structured content) and big
(one text item of exactly the given number of bytes), as the Go test
upstream has them.

    python3 server.py
"""

import json
import sys

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PATTERN = "0123456789abcdef\n"
MAX_BIG = 64 << 20

TOOLS = [
    {
        "name": "echo",
        "description": "Echo a message back. Returns the message as text and as structured content.",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to echo."}},
            "required": ["message"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "big",
        "description": "Return one text content of exactly the given number of bytes of ASCII.",
        "inputSchema": {
            "type": "object",
            "properties": {"bytes": {"type": "integer", "minimum": 0, "maximum": MAX_BIG}},
            "required": ["bytes"],
        },
        "annotations": {"readOnlyHint": True},
    },
]


class InvalidParams(Exception):
    pass


def text_result(text, structured=None, is_error=False):
    res = {"content": [{"type": "text", "text": text}]}
    if structured is not None:
        res["structuredContent"] = structured
    if is_error:
        res["isError"] = True
    return res


def call_tool(params):
    name = params.get("name")
    args = params.get("arguments") or {}
    if not isinstance(args, dict):
        raise InvalidParams("arguments must be an object")
    if name == "echo":
        message = args.get("message")
        if not isinstance(message, str):
            return text_result('invalid arguments: "message" must be a string', is_error=True)
        return text_result(message, {"message": message})
    if name == "big":
        n = args.get("bytes")
        if type(n) is not int or not 0 <= n <= MAX_BIG:
            return text_result(f'invalid arguments: "bytes" must be an integer from 0 to {MAX_BIG}', is_error=True)
        return text_result((PATTERN * (n // len(PATTERN) + 1))[:n])
    raise InvalidParams(f"unknown tool {name!r}")


def handle(method, params):
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "pyupstream", "title": "Python test upstream", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return call_tool(params)
    return None


def main():
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "method" not in msg:
            continue  # a response to nothing we asked, or garbage
        if "id" not in msg:
            continue  # a notification (initialized, cancelled): nothing to answer
        reply = {"jsonrpc": "2.0", "id": msg["id"]}
        params = msg.get("params") or {}
        try:
            result = handle(msg["method"], params if isinstance(params, dict) else {})
        except InvalidParams as e:
            reply["error"] = {"code": -32602, "message": str(e)}
        else:
            if result is None:
                reply["error"] = {"code": -32601, "message": f"method not found: {msg['method']}"}
            else:
                reply["result"] = result
        out.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
