// A real TypeScript-SDK MCP client that sends bridge serve a request over
// its limit, for TestDoorsStdioOversizedRequest: it starts the command
// after "--" over stdio, makes one run_python call to warm up, prints
// {"event":"ready","pid":N} and waits for a line on stdin; then it sends a
// run_python call with MB megabytes of code and, without waiting for it, a
// second call, and prints one line per call as each settles:
// {"event":"large"|"small","ms":N,"code":N,"message":"...","result":{...}}.
// A call not answered within TIMEOUT_MS ends with the SDK's own timeout
// error (-32001).
//
// Usage: node oversized-client.mjs MB TIMEOUT_MS -- COMMAND [ARGS...]
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const sep = process.argv.indexOf("--");
if (sep !== 4 || sep + 1 >= process.argv.length) {
  console.error("usage: node oversized-client.mjs MB TIMEOUT_MS -- COMMAND [ARGS...]");
  process.exit(2);
}
const mb = Number(process.argv[2]);
const timeout = Number(process.argv[3]);
const [command, ...args] = process.argv.slice(sep + 1);

const print = (o) => console.log(JSON.stringify(o));
const client = new Client({ name: "oversized-client", version: "1" });
// A response the SDK cannot match (an error with "id": null) is reported
// here, not to the call that is waiting for it.
client.onerror = (e) => console.error("client error:", String(e.message ?? e).slice(0, 300));
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
await client.connect(transport);
try {
  const warm = await client.callTool({ name: "run_python", arguments: { code: "print(1)" } }, undefined, { timeout });
  if (warm.structuredContent?.status !== "ok") throw new Error("warm-up: " + JSON.stringify(warm));
  print({ event: "ready", pid: transport.pid });
  const lines = createInterface({ input: process.stdin });
  for await (const _ of lines) break;

  const start = Date.now();
  const settle = (event, p) =>
    p.then(
      (result) => print({ event, ms: Date.now() - start, result }),
      (e) => print({ event, ms: Date.now() - start, code: e.code, message: String(e.message ?? e) }),
    );
  const code = "#" + "x".repeat(mb << 20);
  // Both requests are written before either is answered: the second one
  // is right behind the large line on the bridge's stdin.
  const large = client.callTool({ name: "run_python", arguments: { code } }, undefined, { timeout });
  const small = client.callTool({ name: "run_python", arguments: { code: "print(6*7)" } }, undefined, { timeout });
  await Promise.all([settle("large", large), settle("small", small)]);
} finally {
  await client.close();
}
