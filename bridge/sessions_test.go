package bridge

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		{map[string]any{"code": "x", "sesion": "a"}, "takes only code, timeout_seconds, session and reset"},
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
	if !strings.Contains(in, `"session":{"type":"string"}`) || !strings.Contains(in, `"reset":{"type":"boolean"}`) || !strings.Contains(desc, "unless they share a session name") {
		t.Errorf("sessions on: %s\n%s", in, desc)
	}
}
