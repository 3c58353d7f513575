package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/skills"
	"github.com/bridge-mcp/bridge/policy"
)

// skillsPolicyFile writes a policy whose skills folder is dir (with extra
// skills keys) and returns its path.
func skillsPolicyFile(t *testing.T, dir, extra string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte("version: 1\nskills:\n  dir: "+dir+"\n"+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSkillsCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "skills")
	pol := skillsPolicyFile(t, dir, "")
	if _, errOut, code := runCLI(t, "skills", "list", "--policy", pol); code != 0 || !strings.Contains(errOut, "no skills in "+dir) {
		t.Errorf("list of none: %d %q", code, errOut)
	}
	if out, _, code := runCLI(t, "skills", "list", "--json", "--policy", pol); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json of none: %d %q", code, out)
	}
	st, err := skills.Open(dir, skills.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Save(skills.Skill{Name: "top", Description: "The top n", Signature: "(n=5)", Servers: []string{"github"},
		Source: "def top(n=5):\n    return n\n"}, false); err != nil {
		t.Fatal(err)
	}
	out, _, code := runCLI(t, "skills", "list", "--policy", pol)
	if code != 0 || !strings.Contains(out, "top") || !strings.Contains(out, "(n=5)") || !strings.Contains(out, "github") || !strings.Contains(out, "The top n") {
		t.Errorf("list: %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "skills", "list", "--json", "--policy", pol)
	var list []skills.Skill
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 || list[0].Name != "top" || list[0].Source != "" {
		t.Errorf("list --json: %d %v\n%s", code, err, out)
	}
	out, _, code = runCLI(t, "skills", "show", "--policy", pol, "top")
	if code != 0 || !strings.Contains(out, "# from skills import top; top(n=5)") || !strings.HasSuffix(out, "\ndef top(n=5):\n    return n\n") {
		t.Errorf("show: %d\n%s", code, out)
	}
	if _, errOut, code := runCLI(t, "skills", "show", "--policy", pol, "tpo"); code != 1 || !strings.Contains(errOut, `no such skill: "tpo" in `+dir) {
		t.Errorf("show of a missing skill: %d %q", code, errOut)
	}

	// A file written by other means with terminal escapes in it is shown
	// with them visible, not acted on by the terminal.
	forged := `{"name": "forged", "description": "fine\u001b[2K", "source": "x = 1  # \u001b[1A\u001b[2Khidden\nok = 1\r\n", "saved": "2026-11-24T10:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "forged.skill.json"), []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runCLI(t, "skills", "show", "--policy", pol, "forged")
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `\x1b[1A\x1b[2Khidden`) || !strings.Contains(out, "WARNING") || !strings.Contains(out, "ok = 1\r\n") {
		t.Errorf("show of a forged skill:\n%q", out)
	}
	out, _, _ = runCLI(t, "skills", "list", "--policy", pol)
	if strings.Contains(out, "\x1b") || !strings.Contains(out, `fine\x1b[2K`) {
		t.Errorf("list of a forged skill: %q", out)
	}
	// And with bidi controls (Trojan Source), shown escaped.
	trojan := `{"name": "trojan", "description": "sends mail\u202e", "source": "access = 'user\u202e \u2066# admin\u2069 \u2066'\n", "saved": "2026-11-24T10:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "trojan.skill.json"), []byte(trojan), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runCLI(t, "skills", "show", "--policy", pol, "trojan")
	if strings.ContainsAny(out, "\u202e\u2066\u2069") || !strings.Contains(out, `access = 'user\u{202e} \u{2066}# admin\u{2069} \u{2066}'`) || !strings.Contains(out, "WARNING") {
		t.Errorf("show of a skill with bidi controls:\n%q", out)
	}

	// rm: removes; a name that is not there fails; a read-only folder refuses.
	ro := skillsPolicyFile(t, dir, "  read_only: true\n")
	if _, errOut, code := runCLI(t, "skills", "rm", "--policy", ro, "top"); code != 1 || !strings.Contains(errOut, "read-only (skills.read_only)") {
		t.Errorf("rm with read_only: %d %q", code, errOut)
	}
	if out, errOut, code := runCLI(t, "skills", "rm", "--policy", pol, "top", "nope"); code != 1 || out != "removed top\n" || !strings.Contains(errOut, `no such skill: "nope"`) {
		t.Errorf("rm top nope: %d %q %q", code, out, errOut)
	}
	if _, err := st.Get("top"); err == nil {
		t.Error("rm left the skill")
	}
	if _, errOut, code := runCLI(t, "skills", "frob"); code != 2 || !strings.Contains(errOut, `unknown subcommand "frob"`) {
		t.Errorf("skills frob: %d %q", code, errOut)
	}
}

// Saving follows the policy in force, not the one a run is pinned to: a
// reload that turns saving off stops runs already going.
func TestSkillsFollowThePolicyInForce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "skills")
	path := skillsPolicyFile(t, dir, "")
	pol, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, path, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h := withSkills(nil, store, nil, nil, zerolog.Nop())
	store.Begin("run-1")
	defer store.End("run-1")
	save := func(name string) *relay.ToolError {
		args, _ := json.Marshal(map[string]any{"name": name, "source": "x = 1\n", "description": "", "signature": "", "servers": []string{}, "overwrite": false})
		return h.Query(context.Background(), "run-1", relay.Query{ID: 1, Op: relay.OpSaveSkill, Args: args}).Error
	}
	if err := save("before"); err != nil {
		t.Fatalf("save with saving on: %+v", err)
	}
	if err := os.WriteFile(path, []byte("version: 1\nskills:\n  dir: "+dir+"\n  save: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := store.ReloadNow(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if err := save("after"); err == nil || err.Type != relay.ErrDenied {
		t.Errorf("save by a run begun before saving was turned off: %+v", err)
	}
}
