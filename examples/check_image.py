"""Reads the MCP Inspector CLI's JSON answer to tools/call on stdin and
checks that it holds a PNG image: prints its size, exits 1 if there is none.
Standard library only."""
import base64
import json
import struct
import sys

doc = json.load(sys.stdin)
result = doc.get("result", doc)  # --format json wraps the answer in {"result": ...}
images = [c for c in result.get("content", []) if c.get("type") == "image"]
for c in result.get("content", []):
    if c.get("type") == "text":
        print(c["text"])
if result.get("isError") or not images:
    sys.exit("no image came back")
data = base64.b64decode(images[0]["data"])
if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
    sys.exit("the image is not a PNG")
width, height = struct.unpack(">II", data[16:24])
print(f"the chart arrived as {images[0]['mimeType']}: {width}x{height}, {len(data)} bytes")
