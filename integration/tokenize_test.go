package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The code of TestTokenize: it reads a customer's record through one
// tool, passes the email on to a tool allowed to receive it and to one
// that is not, and prints what it holds. Then it tries tokenization as an
// oracle: a guess of the value, and a wrong one, sent to a tool that
// echoes them.
const tokenizeCode = `import re, mcp_tools
r = mcp_tools.call("misbehave", "record")
print(r)
email = re.search(r"<EMAIL_[0-9]+>", str(r)).group()
again = mcp_tools.call("misbehave", "echo", message=email + " again")
print(again["message"])
try:
    mcp_tools.call("misbehave", "fail", message="send to " + email)
except mcp_tools.ToolError as e:
    print("fail:", e)
print(mcp_tools.call("misbehave", "echo", message="not restored: " + email)["message"])
for guess in ("jane.doe@example.com", "john.roe@example.com"):
    print("guess:", mcp_tools.call("misbehave", "echo", message=guess)["message"])
`

func TestTokenize(t *testing.T) {
	forEngines(t, aboveEngine("tokenizing personal data in tool calls"), func(t *testing.T, e *engine) {
		servers, record := recordingServers(t, "--fixture", "Write to jane.doe@example.com, call +44 20 7946 0958, pay DE89 3704 0044 0532 0130 00")
		path := filepath.Join(t.TempDir(), "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + `tokenize:
  results: [{server: misbehave, tool: record}]
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
			"not restored: <EMAIL_1>\n" +
			// No oracle through echo (not in results): a guess comes back
			// as sent, right or wrong (it came back <EMAIL_1> when right).
			"guess: jane.doe@example.com\n" +
			"guess: john.roe@example.com\n"
		if out.Status != "ok" || out.Stdout != want {
			t.Fatalf("got %+v\n%s\nwant stdout:\n%s", out, text, want)
		}
		for _, secret := range []string{"7946", "3704"} {
			if strings.Contains(text, secret) {
				t.Errorf("the agent's text holds %q: %s", secret, text)
			}
		}
		if n := strings.Count(out.Stdout, "jane.doe"); n != 1 {
			t.Errorf("the code saw the email %d times, want once (its own guess)", n)
		}
		fail := recordedArgs(t, record, "fail")
		if len(fail) != 1 || !strings.Contains(fail[0], "send to jane.doe@example.com") {
			t.Errorf("the tool allowed to receive it got %q", fail)
		}
		echo := recordedArgs(t, record, "echo")
		var last struct{ Message string }
		if len(echo) == 4 {
			_ = json.Unmarshal([]byte(echo[1]), &last)
		}
		if last.Message != "not restored: <EMAIL_1>" {
			t.Errorf("the tool not allowed to receive it got %q", echo)
		}
	})
}

// TestTokenizeSession: in a session, a placeholder kept in a variable from
// an earlier call still stands for its own value in a later one. The
// session's calls share one vault: before they did not, and the later
// call's first email took the same placeholder, so the kept one was put
// back as the other person's address.
//
// With a remote MCP proxy (`bridge proxy --http`, which applies the
// tokenize section), the proxy keeps the session's values for its calls
// too: the bridge names them with each call (MetaVault).
func TestTokenizeSession(t *testing.T) {
	scope := aboveEngine("tokenizing personal data in a session's tool calls")
	runsOn(t, scope)
	const tokenize = `tokenize:
  results: [{server: misbehave, tool: echo}]
  restore: [{server: misbehave, tool: fail}]
`
	for _, remote := range []bool{false, true} {
		name := "local"
		if remote {
			name = "remote"
		}
		t.Run(name, func(t *testing.T) {
			forEngines(t, scope, func(t *testing.T, e *engine) {
				servers, record := recordingServers(t)
				dir := t.TempDir()
				path := filepath.Join(dir, "policy.yaml")
				pol := "version: 1\n" + sandboxSection(e) + "pool:\n  size: 1\nsessions:\n  enabled: true\n"
				args := []string{"--policy", path}
				if remote {
					proxyPolicy := filepath.Join(dir, "proxy.yaml")
					if err := os.WriteFile(proxyPolicy, []byte("version: 1\n"+tokenize), 0o644); err != nil {
						t.Fatal(err)
					}
					a, _ := startProxy(t, servers, "--policy", proxyPolicy)
					args = append(args, "--proxy-url", "http://"+a+"/mcp")
				} else {
					pol += tokenize
					args = append(args, "--servers-config", servers)
				}
				if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
					t.Fatal(err)
				}
				var cs *mcp.ClientSession
				if remote {
					cs, _, _ = connectStdioArgs(t, e, nil, args...)
				} else {
					cs = connectAsking(t, e, nil, "", args...)
				}
				tokenizeSession(t, cs, record)
			})
		})
	}
}

func tokenizeSession(t *testing.T, cs *mcp.ClientSession, record string) {
	{
		first := `import mcp_tools
kept = mcp_tools.call("misbehave", "echo", message="jane.doe@example.com")["message"]
print(kept)
`
		out, text := sessionCall(t, cs, map[string]any{"code": first, "session": "crm"})
		if out.Status != "ok" || out.Stdout != "<EMAIL_1>\n" {
			t.Fatalf("first call: %+v\n%s", out, text)
		}
		second := `import mcp_tools
other = mcp_tools.call("misbehave", "echo", message="john.roe@example.com")["message"]
print(other)
try:
    mcp_tools.call("misbehave", "fail", message="send to " + kept)
except mcp_tools.ToolError as e:
    print("fail:", e)
`
		out, text = sessionCall(t, cs, map[string]any{"code": second, "session": "crm"})
		if out.Status != "ok" || out.Stdout != "<EMAIL_2>\nfail: tool 'fail' of MCP server 'misbehave' failed: send to <EMAIL_1>\n" {
			t.Errorf("second call: %+v\n%s", out, text)
		}
		fail := recordedArgs(t, record, "fail")
		if len(fail) != 1 || !strings.Contains(fail[0], "send to jane.doe@example.com") {
			t.Errorf("the tool allowed to receive the kept placeholder's value got %q, want jane.doe's address", fail)
		}
	}
}
