package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIRunUpstreamExitsAtStart: a server that exits during start-up
// reaches the code as an error with its exit status and the last lines of
// its stderr, with the secrets of its env redacted, and `bridge run` logs
// the failed start once on its own stderr at its default level.
func TestCLIRunUpstreamExitsAtStart(t *testing.T) {
	scope := aboveEngine("an upstream that exits at start")
	runsOn(t, scope)
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers.json")
	writeServers(t, servers, map[string]any{
		"gh": map[string]any{
			"command": "sh",
			"args":    []string{"-c", `echo "Error: GITHUB_TOKEN is not set" >&2; echo "token was $SECRET" >&2; exit 1`},
			"env":     map[string]string{"SECRET": "s3cr3t-value"},
		},
	})
	code := `import mcp_tools
try:
    mcp_tools.call("gh", "x")
except mcp_tools.UpstreamError as e:
    print("code saw:", e)
`
	forEngines(t, scope, func(t *testing.T, e *engine) {
		policyFile := filepath.Join(dir, "policy-"+e.name+".yaml")
		if err := os.WriteFile(policyFile, []byte("version: 1\n"+sandboxSection(e)), 0o644); err != nil {
			t.Fatal(err)
		}
		env := append(engineEnv(e), "XDG_CONFIG_HOME="+dir, "BRIDGE_LOG_LEVEL=")
		stdout, stderr, exit := bridgeCLI(t, env, code, "run", "--policy", policyFile, "--servers-config", servers, "-")
		report := func() string { return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr) }
		want := `code saw: server "gh" is unavailable: it exited during start-up (exit status 1); its stderr ended with:
  Error: GITHUB_TOKEN is not set
  token was <redacted>
`
		if exit != 0 || stdout != want {
			t.Errorf("the code's error: want stdout\n%s\ngot %s", want, report())
		}
		if strings.Contains(stdout+stderr, "s3cr3t-value") {
			t.Errorf("the secret leaked: %s", report())
		}
		// The bridge's own log: one warning for the failed start, with the
		// server's name and its stderr.
		var records []string
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, `"server":"gh"`) {
				records = append(records, line)
			}
		}
		if len(records) != 1 || !strings.Contains(records[0], `"level":"warn"`) ||
			!strings.Contains(records[0], `exited during start-up (exit status 1); its stderr ended with:\n  Error: GITHUB_TOKEN is not set`) {
			t.Errorf("want one warning about gh's start in the log; got %q\n%s", records, report())
		}
	})
}

// TestCLIServersConfigMisspelt: a servers file named on the command line
// whose servers key is misspelt stops the bridge with an error that names
// the key it meant, instead of running with no servers.
func TestCLIServersConfigMisspelt(t *testing.T) {
	noEngine(t)
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers.json")
	if err := os.WriteFile(servers, []byte(`{"mcp_servers": {"gh": {"command": "gh-mcp"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, exit := bridgeCLI(t, []string{"XDG_CONFIG_HOME=" + dir}, "print('ran')", "run", "--servers-config", servers, "-")
	want := servers + `: no "mcpServers" key (Claude Desktop, Claude Code, Cursor) or "servers" key (VS Code) at the top level, ` +
		`so no servers to load; did you mean "mcpServers" instead of "mcp_servers"?`
	if exit == 0 || stdout != "" || !strings.Contains(stderr, want) {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant an error containing:\n%s", exit, stdout, stderr, want)
	}
}
