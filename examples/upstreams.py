# What run_python is for: the code uses the tools of other MCP servers, works
# on their data inside the sandbox, and prints only the answer.
#   bridge run --servers-config examples/servers.json examples/upstreams.py
# (make demo runs it with the reference servers from npm; the filesystem
# server may read this examples/ folder and nothing else.)
import mcp_tools

print("servers:", ", ".join(s["name"] for s in mcp_tools.servers()))
hits = mcp_tools.search("list the files in a directory", limit=3)
print("search:", ", ".join(f"{h['server']}.{h['tool']}" for h in hits))

root = mcp_tools.call("filesystem", "list_allowed_directories")["content"].splitlines()[1]
listing = mcp_tools.call("filesystem", "list_directory", path=root)["content"].splitlines()
files = [line.removeprefix("[FILE] ") for line in listing if line.startswith("[FILE] ")]
lines = {}
for name in files:
    text = mcp_tools.call("filesystem", "read_text_file", path=f"{root}/{name}")["content"]
    lines[name] = len(text.splitlines())
longest = max(lines, key=lines.get)
print(f"read {len(files)} files in the sandbox: {sum(lines.values())} lines, the longest is {longest}")

mcp_tools.call("memory", "create_entities", entities=[
    {"name": "examples-folder", "entityType": "folder", "observations": [f"{len(files)} files, longest {longest}"]},
])
node = mcp_tools.call("memory", "open_nodes", names=["examples-folder"])["entities"][0]
print("remembered:", node["observations"][-1])
print(mcp_tools.call("everything", "get-sum", a=len(files), b=sum(lines.values())))
