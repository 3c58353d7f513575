package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The code of TestTokenize: it reads a customer's contact through one tool,
// passes the email on to a tool allowed to receive it and to one that is
// not, and prints what it holds.
const tokenizeCode = `import re, mcp_tools
r = mcp_tools.call("misbehave", "echo", message="Write to jane.doe@example.com, call +44 20 7946 0958, pay DE89 3704 0044 0532 0130 00")
print(r["message"])
email = re.search(r"<EMAIL_[0-9]+>", r["message"]).group()
again = mcp_tools.call("misbehave", "echo", message="jane.doe@example.com again")
print(again["message"])
try:
    mcp_tools.call("misbehave", "fail", message="send to " + email)
except mcp_tools.ToolError as e:
    print("fail:", e)
print(mcp_tools.call("misbehave", "echo", message="not restored: " + email)["message"])
`

// TestTokenize: personal data in a tokenized tool's results reaches the
// code as placeholders, the same value as the same placeholder; a tool
// allowed to receive it gets the real value (the upstream's record says
// so), and what it answers comes back tokenized; a tool not allowed gets
// the placeholder. Nothing the code prints holds the value.
func TestTokenize(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		servers, record := recordingServers(t)
		path := filepath.Join(t.TempDir(), "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + `tokenize:
  results: [{server: misbehave, tool: echo}]
  restore: [{server: misbehave, tool: fail}]
`
		if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		cs := connectAsking(t, e, nil, "", "--policy", path, "--servers-config", servers)
		out, text := traceCall(t, cs, tokenizeCode)
		want := "Write to <EMAIL_1>, call <PHONE_1>, pay <IBAN_1>\n" +
			"<EMAIL_1> again\n" +
			"fail: tool 'fail' of MCP server 'misbehave' failed: send to <EMAIL_1>\n" +
			"not restored: <EMAIL_1>\n"
		if out.Status != "ok" || out.Stdout != want {
			t.Fatalf("got %+v\n%s\nwant stdout:\n%s", out, text, want)
		}
		for _, secret := range []string{"jane.doe", "7946", "3704"} {
			if strings.Contains(text, secret) {
				t.Errorf("the agent's text holds %q: %s", secret, text)
			}
		}
		fail := recordedArgs(t, record, "fail")
		if len(fail) != 1 || !strings.Contains(fail[0], "send to jane.doe@example.com") {
			t.Errorf("the tool allowed to receive it got %q", fail)
		}
		echo := recordedArgs(t, record, "echo")
		var last struct{ Message string }
		if len(echo) == 3 {
			_ = json.Unmarshal([]byte(echo[2]), &last)
		}
		if last.Message != "not restored: <EMAIL_1>" {
			t.Errorf("the tool not allowed to receive it got %q", echo)
		}
	})
}
