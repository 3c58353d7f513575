// Package proxy is the MCP proxy between the code in the sandbox and the
// upstream MCP servers: one MCP server that offers every upstream tool as
// SERVER__TOOL, and applies the operator's policy to every call before it
// reaches a server. A bridge runs it in its own process, or several share
// one (`bridge proxy --http`). Its files, by area:
//
//   - config*.go: the servers config, the mcpServers files of the MCP
//     clients (JSON with comments, ${VAR} expansion, precedence by file);
//   - upstream*.go: one session per server, started on first use,
//     restarted after a crash, backed off after a failed start; its
//     stderr, its HTTP client, its big results passed through raw;
//   - proxy.go: the MCP server, its tool list kept in step with the
//     servers and the policy, and the bridge://servers resource;
//   - gate*.go: one call through the policy (run, budgets, rules, the
//     human's answer, rates, tokenization) to its server, audited;
//   - toolpolicy.go: what the policy decides on for a tool, from its MCP
//     definition: the gate's one rule, which `bridge policy explain` uses
//     too;
//   - client*.go: the bridge's side, with its cached catalog, calling a
//     proxy in its own process directly;
//   - redact.go: secrets kept out of errors and logs.
//
// What the code sees of the tools (the catalog, its search, the shapes of
// results) is package proxy/catalog.
package proxy
