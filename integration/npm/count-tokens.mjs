#!/usr/bin/env node
// Prints the o200k_base token count of a JSON document's compact
// serialization (JSON.stringify of the parsed document: no whitespace, keys
// in their original order).
//
//   node count-tokens.mjs FILE
//   node count-tokens.mjs < FILE
//
// The ranks ship inside js-tiktoken (js-tiktoken/ranks/o200k_base): nothing
// is fetched at run time. Exit status 2 on unreadable or invalid JSON input.
import { readFileSync } from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import o200k_base from "js-tiktoken/ranks/o200k_base";

const args = process.argv.slice(2);
if (args.length > 1 || args[0] === "-h" || args[0] === "--help") {
  process.stderr.write("usage: node count-tokens.mjs [FILE]   (JSON on stdin without FILE)\n");
  process.exit(2);
}

let text;
try {
  text = readFileSync(args.length === 1 && args[0] !== "-" ? args[0] : 0, "utf8");
} catch (err) {
  process.stderr.write(`count-tokens: reading ${args[0] ?? "stdin"}: ${err.message}\n`);
  process.exit(2);
}

let doc;
try {
  doc = JSON.parse(text);
} catch (err) {
  process.stderr.write(`count-tokens: input is not JSON: ${err.message}\n`);
  process.exit(2);
}

const enc = new Tiktoken(o200k_base);
process.stdout.write(`${enc.encode(JSON.stringify(doc)).length}\n`);
