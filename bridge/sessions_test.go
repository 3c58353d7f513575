package bridge

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// policyServer is a Server under a policy file with body, and the store.
func policyServer(t *testing.T, body string, run func(context.Context, sandbox.Request) (sandbox.Result, error)) (*Server, *policy.Store, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("version: 1\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newServer(t, Options{Policy: store, Instances: withRunner(run)}), store, file
}

func TestSessionArguments(t *testing.T) {
	ok := func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK}, nil
	}
	off, _, _ := policyServer(t, "", ok)
	cs := connect(t, off, nil)
	_, out := call(t, cs, map[string]any{"code": "x = 1", "session": "a"})
	if out.Status != statusInvalid || !strings.Contains(out.Message, "sessions.enabled") {
		t.Errorf("session with sessions off: %+v", out)
	}

	on, _, _ := policyServer(t, "sessions:\n  enabled: true\n", ok)
	cs = connect(t, on, nil)
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"code": "x", "session": "../x"}, "not a session name"},
		{map[string]any{"code": "x", "session": ""}, "not a session name"},
		{map[string]any{"code": "x", "session": strings.Repeat("a", 65)}, "not a session name"},
		{map[string]any{"code": "x", "session": 3}, "session must be a string"},
		{map[string]any{"code": "x", "reset": true}, "pass the session's name"},
		{map[string]any{"code": "x", "session": "a", "reset": "yes"}, "reset must be true or false"},
		{map[string]any{"code": " ", "session": "a"}, "code is empty"},
		{map[string]any{"code": "x", "sesion": "a"}, "takes only code, timeout_seconds, inputs, session and reset"},
	} {
		if _, out := call(t, cs, c.args); out.Status != statusInvalid || !strings.Contains(out.Message, c.want) {
			t.Errorf("%v: %+v, want invalid with %q", c.args, out, c.want)
		}
	}
	// Ending a session that does not exist says so.
	if r, out := call(t, cs, map[string]any{"code": "", "session": "a", "reset": true}); out.Status != "ok" || !strings.Contains(text(r), `no session "a"`) {
		t.Errorf("reset of nothing: %+v", out)
	}
	// An instance that keeps no interpreter (this fake's) ends its session
	// with the call, and says so.
	if _, out := call(t, cs, map[string]any{"code": "x", "session": "a"}); out.Status != "ok" || !strings.Contains(out.SessionEnded, "its interpreter is gone") {
		t.Errorf("an instance that keeps nothing: %+v", out)
	}
	if on.Sessions() != 0 {
		t.Errorf("%d sessions left", on.Sessions())
	}
}

// The tool's schema offers session and reset only while the policy
// enables sessions, and follows a reload.
func TestSessionSchemaFollowsPolicy(t *testing.T) {
	s, store, file := policyServer(t, "", nil)
	cs := connect(t, s, nil)
	schema := func() (string, string) {
		t.Helper()
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := json.Marshal(res.Tools[0].InputSchema)
		return string(in), res.Tools[0].Description
	}
	if in, desc := schema(); strings.Contains(in, "session") || strings.Contains(desc, "session") {
		t.Errorf("sessions off, but the tool mentions them: %s\n%s", in, desc)
	}
	if err := os.WriteFile(file, []byte("version: 1\nsessions:\n  enabled: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := store.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	in, desc := schema()
	if !strings.Contains(in, `"session":{"pattern":"^[A-Za-z0-9][\\w.-]{0,63}$","type":"string","x-mcp-header":"Session"}`) || !strings.Contains(in, `"reset":{"type":"boolean"}`) ||
		!strings.Contains(desc, "unless calls share a session") || strings.Contains(desc, "fresh isolated") || strings.Contains(desc, "nothing kept") {
		t.Errorf("sessions on: %s\n%s", in, desc)
	}
}

// The session's pattern in the schema is the rule parseInput applies:
// what one accepts, so does the other (JSON Schema's \w is ASCII too).
func TestSessionNamePattern(t *testing.T) {
	var schema struct {
		Properties struct {
			Session struct{ Pattern string } `json:"session"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(runPythonTool(toolInfo{maxTimeout: time.Minute, sessions: true}).InputSchema.(json.RawMessage), &schema); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(schema.Properties.Session.Pattern)
	for name, ok := range map[string]bool{
		"a": true, "A.b-c_9": true, "0": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "_a": false, ".a": false, "-a": false, "a b": false, "a/b": false, "é": false, "a\n": false,
	} {
		if re.MatchString(name) != ok || sessionNamePattern.MatchString(name) != ok {
			t.Errorf("session name %q: schema %v, parseInput %v; want %v", name, re.MatchString(name), sessionNamePattern.MatchString(name), ok)
		}
	}
}

// The description says what this bridge is: fresh containers or
// sessions, where the policy's folders are (a few of them, and how many
// more), the data-science packages when the image has them.
func TestToolDescription(t *testing.T) {
	mounts := []string{"/data/sales", "/data/other", "/data/reports", "/data/a", "/data/b"}
	for _, c := range []struct {
		name     string
		ti       toolInfo
		has, not []string
	}{
		{"plain", toolInfo{}, []string{"fresh isolated container", "nothing kept between calls", "import mcp_tools", "help()"}, []string{"session", "Data:", "numpy"}},
		{"sessions", toolInfo{sessions: true}, []string{"a fresh one per call unless calls share a session (reset:true ends it)"}, []string{"fresh isolated", "nothing kept"}},
		{"a mount", toolInfo{mounts: mounts[:1]}, []string{" Data: /data/sales."}, nil},
		{"three mounts", toolInfo{mounts: mounts[:3]}, []string{" Data: /data/sales, /data/other, /data/reports."}, []string{"more"}},
		{"five mounts", toolInfo{mounts: mounts}, []string{" Data: /data/sales, /data/other, /data/reports +2 more."}, []string{"/data/a"}},
		{"datascience", toolInfo{dataScience: true}, []string{"numpy, pandas, matplotlib", "`mcp_tools.show(fig)` saves a chart"}, nil},
	} {
		desc := runPythonTool(c.ti).Description
		for _, w := range c.has {
			if !strings.Contains(desc, w) {
				t.Errorf("%s: the description lacks %q: %s", c.name, w, desc)
			}
		}
		for _, w := range c.not {
			if strings.Contains(desc, w) {
				t.Errorf("%s: the description says %q: %s", c.name, w, desc)
			}
		}
	}
}

// The description follows a reload of the policy's mounts, and clients
// are told (notifications/tools/list_changed).
func TestToolDescriptionFollowsMounts(t *testing.T) {
	s, store, file := policyServer(t, "", nil)
	changed := make(chan struct{}, 4)
	cs := connect(t, s, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }})
	desc := func() string {
		t.Helper()
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tools[0].Description
	}
	if d := desc(); strings.Contains(d, "Data:") {
		t.Fatalf("no mounts, but: %s", d)
	}
	dir := t.TempDir()
	for _, n := range []string{"sales", "other"} {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pol := "version: 1\nmounts:\n  - host: " + filepath.Join(dir, "sales") + "\n  - host: " + filepath.Join(dir, "other") + "\n    path: /data/in\n"
	if err := os.WriteFile(file, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Reload(); !ok || err != nil {
		t.Fatalf("reload: %v %v", ok, err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the mounts changed")
	}
	if d := desc(); !strings.Contains(d, " Data: /data/sales, /data/in.") {
		t.Fatalf("after the reload: %s", d)
	}
}
