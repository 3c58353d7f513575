// The TypeScript SDK 2.x client (@modelcontextprotocol/client) and the Tasks
// extension's client (@modelcontextprotocol/ext-tasks) against `bridge
// serve --http`, for the integration tests (TestTypeScript2Client). It
// connects over streamable HTTP to the URL in argv with the bearer token in
// $MCP_BEARER_TOKEN, negotiating the protocol revision (versionNegotiation
// "auto": it asks server/discover for 2026-07-28, else falls back to
// initialize; { mode: { pin: "2026-07-28" } } would allow no fallback), and
// prints one JSON line per step, {"step": NAME, ...}:
//
//   connect  the negotiated version, era, MCP session id, whether the server
//            declares the Tasks extension
//   tools    the tools listed, and run_python's session property's
//            x-mcp-header
//   call     twice, run_python in session "ts" (x = 1, then print(x)): the
//            structured result
//   headers  the Mcp-* headers of each tools/call request sent so far
//   task     a 4 s run through ext-tasks: how it was answered (immediate or
//            task) and the task id
//   settled  its outcome, the task states seen, the result's stdout
//   running  a 300 s run through ext-tasks, a task: its id; the script then
//            waits for a line on stdin (the test counts containers)
//   cancel   that task cancelled through ext-tasks: its outcome
//   error    a step that threw: which, and why (then the script exits 1)
//   background-error  what ext-tasks reported on the side (a task status it
//            could not read, say)
//
// ext-tasks talks to a 2026-07-28 Tasks server below the SDK Client, whose
// result decoding refuses resultType "task": it needs a rawDispatch that
// sends a request on the Client's transport and matches its response
// itself, and the framing the Client sends (version, clientInfo,
// capabilities). rawDispatch here does what the MCP Inspector's
// RawWireChannel does: its own string ids, the responses to them taken off
// the transport before the Client sees them.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, DispatchError } from "@modelcontextprotocol/ext-tasks/client";
import { createInterface } from "node:readline";

const url = process.argv[2];
if (!url) {
  console.error("usage: MCP_BEARER_TOKEN=TOKEN node modern-client.mjs http://HOST:PORT/mcp");
  process.exit(2);
}
const token = process.env.MCP_BEARER_TOKEN;
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

// rawWire sends requests on transport with ids of its own and hands back
// their responses, taking them off the transport before the Client's
// handler sees them (it knows only its numeric ids).
function rawWire(transport) {
  const pending = new Map();
  let next = 0;
  const sdk = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const resolve = typeof message?.id === "string" ? pending.get(message.id) : undefined;
    if (resolve && ("result" in message || "error" in message)) {
      pending.delete(message.id);
      resolve(message);
      return;
    }
    sdk?.call(transport, message, extra);
  };
  return async (request, options = {}) => {
    const id = `raw-${++next}`;
    const wire = new AbortController();
    const { signal } = options;
    const response = await new Promise((resolve, reject) => {
      const abort = () => {
        pending.delete(id);
        wire.abort(signal.reason);
        reject(signal.reason);
      };
      if (signal?.aborted) return abort();
      signal?.addEventListener("abort", abort, { once: true });
      pending.set(id, (message) => {
        signal?.removeEventListener("abort", abort);
        resolve(message);
      });
      const headers = options.context?.headers;
      transport.send({ jsonrpc: "2.0", id, ...request }, { requestSignal: wire.signal, ...(headers ? { headers } : {}) }).catch((err) => {
        pending.delete(id);
        signal?.removeEventListener("abort", abort);
        reject(new DispatchError(`${request.method}: ${err.message}`, false, { cause: err }));
      });
    });
    return "error" in response ? { kind: "error", error: response.error } : { kind: "result", result: response.result };
  };
}

const stdoutOf = (result) => result?.structuredContent?.stdout;

try {
  const clientInfo = { name: "modern-client", version: "1" };
  const client = new Client(clientInfo, { versionNegotiation: { mode: "auto" } });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: recordingFetch,
    authProvider: { token: async () => token },
  });
  await client.connect(transport);
  const version = client.getNegotiatedProtocolVersion();
  out("connect", {
    version,
    era: client.getProtocolEra(),
    sessionId: transport.sessionId ?? null,
    tasks: client.getServerCapabilities()?.extensions?.["io.modelcontextprotocol/tasks"] !== undefined,
  });

  current = "tools";
  const { tools } = await client.listTools();
  const run = tools.find((t) => t.name === "run_python");
  out("tools", { names: tools.map((t) => t.name), sessionHeader: run?.inputSchema?.properties?.session?.["x-mcp-header"] ?? null });

  current = "call";
  for (const code of ["x = 1", "print(x)"]) {
    const res = await client.callTool({ name: "run_python", arguments: { code, session: "ts" } }, { timeout: 120000 });
    out("call", { structured: res.structuredContent, isError: res.isError ?? false });
  }

  current = "headers";
  out("headers", { calls: sent.filter((s) => s.method === "tools/call").map((s) => s.headers) });

  current = "task";
  const session = createTaskSessionFromClient(client, {
    endpointId: "bridge-integration",
    rawDispatch: rawWire(transport),
    v2RequestFraming: { protocolVersion: version, clientInfo, clientCapabilities: {} },
    onError: (err) => out("background-error", { message: String(err?.message ?? err) }),
  });
  const slow = await session.callTool("run_python", { code: "import time\nprint('started', flush=True)\ntime.sleep(4)\nprint('finished')" });
  out("task", { kind: slow.kind, taskId: slow.handle?.taskId ?? null });
  const states = [];
  const { outcome } = await slow.settle({ onEvent: (ev) => ev.type === "task" && states.push(ev.task.status) });
  out("settled", {
    status: outcome.status,
    states,
    stdout: outcome.status === "completed" ? stdoutOf(outcome.result) : null,
    error: outcome.error ? String(outcome.error.message) : null,
    cause: outcome.error?.cause ? String(outcome.error.cause.message ?? outcome.error.cause) : null,
  });

  current = "cancel";
  const long = await session.callTool("run_python", { code: "import time\ntime.sleep(300)" });
  out("running", { kind: long.kind, taskId: long.handle?.taskId ?? null });
  const stdin = createInterface({ input: process.stdin });
  await stdin[Symbol.asyncIterator]().next();
  stdin.close();
  await long.cancel();
  const cancelled = await long.result();
  out("cancel", { status: cancelled.status });

  await session.close();
  await client.close();
} catch (err) {
  out("error", { at: current, message: String(err?.message ?? err), cause: err?.cause ? String(err.cause.message ?? err.cause) : null });
  process.exitCode = 1;
}
