// A real TypeScript-SDK MCP client with an elicitation handler, for the
// integration tests: it starts the command after "--" (bridge serve) over
// stdio, then makes the run_python calls of the JSON spec on stdin, each
// with its human's answers, and prints one JSON line per call:
// {"structured": ..., "text": "...", "questions": ["message", ...]}.
//
// Spec: {"calls": [{"code": "...", "answers": ["accept" | "accept-remember"
// | "decline" | "cancel" | "silent:MS", ...]}]}. An unexpected question is
// declined.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const sep = process.argv.indexOf("--");
if (sep < 0 || sep + 1 >= process.argv.length) {
  console.error("usage: node elicit-client.mjs -- COMMAND [ARGS...] < spec.json");
  process.exit(2);
}
const [command, ...args] = process.argv.slice(sep + 1);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const spec = JSON.parse(input);

const client = new Client({ name: "elicit-client", version: "1" }, { capabilities: { elicitation: {} } });
let answers = [];
let questions = [];
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  questions.push(req.params.message);
  const answer = answers.shift() ?? "decline";
  if (answer.startsWith("silent:")) {
    await new Promise((r) => setTimeout(r, Number(answer.slice(7))));
    return { action: "accept", content: {} };
  }
  if (answer === "accept" || answer === "accept-remember") {
    return { action: "accept", content: { remember: answer === "accept-remember" } };
  }
  return { action: answer };
});

const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
await client.connect(transport);
try {
  for (const call of spec.calls) {
    answers = [...(call.answers ?? [])];
    questions = [];
    const res = await client.callTool({ name: "run_python", arguments: { code: call.code } }, undefined, { timeout: 120000 });
    const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
    console.log(JSON.stringify({ structured: res.structuredContent, text, questions }));
  }
} finally {
  await client.close();
}
