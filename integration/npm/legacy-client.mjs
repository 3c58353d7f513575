// The TypeScript SDK 1.x client (@modelcontextprotocol/sdk) against `bridge
// serve --http`, for the integration tests (TestTypeScript1ClientLegacy): a
// client of the session era (initialize, Mcp-Session-Id) over streamable
// HTTP to the URL in argv, with the bearer token in $MCP_BEARER_TOKEN. It
// prints one JSON line per step, {"step": NAME, ...}:
//
//   connect  the negotiated version and the MCP session id
//   call     twice, run_python in session "legacy" (x = 1, then print(x)):
//            the structured result
//   headers  the Mcp-* headers of each tools/call request sent
//   again    a second connection with the same token: its MCP session id,
//            and print(x) in session "legacy"
//   other    a connection with $MCP_OTHER_TOKEN (another principal): its
//            print(x) in session "legacy"
//   error    a step that threw: which, and why (then the script exits 1)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.argv[2];
if (!url) {
  console.error("usage: MCP_BEARER_TOKEN=TOKEN MCP_OTHER_TOKEN=TOKEN node legacy-client.mjs http://HOST:PORT/mcp");
  process.exit(2);
}
const out = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
let current = "connect";

// Every POST's JSON-RPC method and Mcp-* headers, as sent.
const sent = [];
const recordingFetch = (input, init = {}) => {
  if ((init.method ?? "GET") === "POST") {
    let body;
    try {
      body = JSON.parse(init.body);
    } catch {
      body = undefined;
    }
    const headers = Object.fromEntries([...new Headers(init.headers)].filter(([k]) => k.startsWith("mcp-")));
    sent.push({ method: body?.method, headers });
  }
  return fetch(input, init);
};

// connect connects a client with token, the way 1.x users pass a bearer
// token: a header on every request.
async function connect(token) {
  const client = new Client({ name: "legacy-client", version: "1" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: recordingFetch,
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

const call = async (client, code) => {
  const res = await client.callTool({ name: "run_python", arguments: { code, session: "legacy" } }, undefined, { timeout: 120000 });
  return { structured: res.structuredContent, isError: res.isError ?? false };
};

try {
  const a = await connect(process.env.MCP_BEARER_TOKEN);
  out("connect", { version: a.transport.protocolVersion ?? null, sessionId: a.transport.sessionId ?? null });

  current = "call";
  for (const code of ["x = 1", "print(x)"]) out("call", await call(a.client, code));
  out("headers", { calls: sent.filter((s) => s.method === "tools/call").map((s) => s.headers) });

  current = "again";
  const again = await connect(process.env.MCP_BEARER_TOKEN);
  out("again", { sessionId: again.transport.sessionId ?? null, ...(await call(again.client, "print(x)")) });

  current = "other";
  const other = await connect(process.env.MCP_OTHER_TOKEN);
  out("other", { sessionId: other.transport.sessionId ?? null, ...(await call(other.client, "print(x)")) });

  for (const c of [a, again, other]) {
    await c.transport.terminateSession();
    await c.client.close();
  }
} catch (err) {
  out("error", { at: current, message: String(err?.message ?? err) });
  process.exitCode = 1;
}
