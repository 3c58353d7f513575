package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// skillsPolicy writes a policy whose skills live in dir, with extra lines
// of the skills section, and returns its path.
func skillsPolicy(t *testing.T, e *engine, dir, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + "skills:\n  dir: " + dir + "\n  max_bytes: 4Ki\n" + extra
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// skillFiles are the names in the skills folder (temporary files too).
func skillFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// The code that saves the skill: a function of the run's own code, which
// calls an upstream tool and uses a helper, a module and a constant of the
// code's globals.
const saveShout = `import json, mcp_tools
EXCLAIM = "!"
def _loud(s):
    return s.upper() + EXCLAIM
def shout(message):
    """Echoes message through the misbehave server, loudly."""
    got = mcp_tools.call("misbehave", "echo", message=message)
    return json.dumps({"said": _loud(got["message"])})
print(json.dumps(mcp_tools.save_skill("shout", shout, description="Echoes a message, loudly")))
`

// refusals tries each bad save in the sandbox and prints, per case, the
// exception's class and type, one JSON object a line.
const refusals = `import json, mcp_tools
ok = "def f():\n    return 1\n"
cases = {
    "traversal": ("../x", ok),
    "stdlib": ("os", ok),
    "mcp_tools": ("mcp_tools", ok),
    "empty": ("", ok),
    "long": ("a" * 300, ok),
    "oversized": ("big", "x = 1\n" * 1000),
    "syntax": ("broken", "def f(:\n    pass\n"),
    "builtin": ("print", ok),
}
for case, (name, source) in cases.items():
    try:
        mcp_tools.save_skill(name, source)
        print(json.dumps({"case": case, "saved": True}))
    except mcp_tools.SkillError as e:
        print(json.dumps({"case": case, "type": e.type, "message": str(e)}))
# Past the runner's own check, straight to the bridge: it refuses too.
from mcp_tools import _skills
for case, name in (("host_package", "numpy"), ("host_builtin", "len")):
    try:
        _skills._ask("save_skill", {"name": name, "source": ok, "description": "", "signature": "", "servers": [], "overwrite": False})
        print(json.dumps({"case": case, "saved": True}))
    except mcp_tools.SkillError as e:
        print(json.dumps({"case": case, "type": e.type, "message": str(e)}))
`

// TestSkills: through a real MCP client, a run saves a skill that calls
// an upstream tool and a later run, in a fresh container, imports and uses
// it; bridge skills list shows it; every bad save is a clear error that
// writes nothing; of two runs saving one name at once one wins, whole; a
// policy that turns saving off refuses it while imports still work.
func TestSkills(t *testing.T) {
	forEngines(t, aboveEngine("skills, saved and imported through the tool host"), func(t *testing.T, e *engine) {
		servers := misbehaveServers(t)
		dir := filepath.Join(t.TempDir(), "skills")
		pol := skillsPolicy(t, e, dir, "  overwrite: true\n")
		debugAddr := freeLoopbackAddr(t)
		cs, _, stderr := connectStdioArgs(t, e, nil, "--policy", pol, "--servers-config", servers, "--debug-addr", debugAddr)
		run := func(code string) (callOutput, string) { return sessionCall(t, cs, map[string]any{"code": code}) }

		// Run 1 saves it.
		out, text := run(saveShout)
		if out.Status != "ok" {
			t.Fatalf("saving: %+v %s", out, text)
		}
		var saved struct {
			Name      string   `json:"name"`
			Signature string   `json:"signature"`
			Servers   []string `json:"servers"`
			Replaced  bool     `json:"replaced"`
		}
		if err := json.Unmarshal([]byte(out.Stdout), &saved); err != nil || saved.Name != "shout" || saved.Signature != "(message)" ||
			len(saved.Servers) != 1 || saved.Servers[0] != "misbehave" || saved.Replaced {
			t.Fatalf("save_skill said %q (%v)", out.Stdout, err)
		}
		if f := skillFiles(t, dir); len(f) != 1 || f[0] != "shout.skill.json" {
			t.Fatalf("the folder holds %v", f)
		}
		awaitLog(t, stderr, "the save's audit", func(log string) bool {
			return strings.Contains(log, `"event":"skill_save"`) && strings.Contains(log, `"outcome":"saved"`) && strings.Contains(log, `"client":"`)
		})

		// Run 2, in a fresh container, imports it and calls it: its tool
		// call goes through the proxy like the run's own.
		out, text = run("from skills import shout\nimport mcp_tools\nprint(shout('hi'))\n" +
			"print([s['name'] for s in mcp_tools.skills()])\n" +
			"print([h.get('skill') for h in mcp_tools.search('shout loudly', limit=3)])\n" +
			"import inspect\nprint(inspect.getsource(shout).splitlines()[0])")
		if out.Status != "ok" {
			t.Fatalf("importing: %+v %s", out, text)
		}
		lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
		if len(lines) != 4 || lines[0] != `{"said": "HI!"}` || lines[1] != "['shout']" || !strings.Contains(lines[2], "'shout'") || lines[3] != "def shout(message):" {
			t.Fatalf("run 2 printed %q", out.Stdout)
		}

		// bridge skills list and show, from the host.
		_, env := serveArgs(e)
		list, errOut, code := bridgeCLI(t, env, "", "skills", "list", "--policy", pol)
		if code != 0 || !strings.Contains(list, "shout") || !strings.Contains(list, "(message)") || !strings.Contains(list, "misbehave") ||
			!strings.Contains(list, "Echoes a message, loudly") {
			t.Errorf("bridge skills list: exit %d\n%s%s", code, list, errOut)
		}
		doc, _, _ := bridgeCLI(t, env, "", "doctor", "--policy", pol, "--runtime", e.cand.Engine)
		if !strings.Contains(doc, "skills: 1 of at most 100 in "+dir+"; runs may save more") {
			t.Errorf("bridge doctor does not say where the skills are:\n%s", doc)
		}
		show, _, code := bridgeCLI(t, env, "", "skills", "show", "--policy", pol, "shout")
		if code != 0 || !strings.Contains(show, "def _loud(s):") || !strings.Contains(show, `EXCLAIM = '!'`) {
			t.Errorf("bridge skills show: exit %d\n%s", code, show)
		}

		// Every bad save: a clear error, and nothing written.
		out, text = run(refusals)
		if out.Status != "ok" {
			t.Fatalf("refusals: %+v %s", out, text)
		}
		want := map[string][2]string{
			"traversal":    {"invalid", "is not valid"},
			"stdlib":       {"invalid", "taken by a module of Python's standard library"},
			"mcp_tools":    {"invalid", "taken by the installed module mcp_tools"},
			"builtin":      {"invalid", "taken by a Python built-in"},
			"host_package": {"invalid", "taken by Python (a keyword, a built-in or a module of its standard library), the data-science image's packages"},
			"host_builtin": {"invalid", "taken by Python (a keyword, a built-in"},
			"empty":        {"invalid", "is not valid"},
			"long":         {"invalid", "is not valid"},
			"oversized":    {"limit", "skills.max_bytes"},
			"syntax":       {"invalid", "does not compile (line 1)"},
		}
		got := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(out.Stdout), "\n") {
			var r struct{ Case, Type, Message string }
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("refusal line %q: %v", l, err)
			}
			got[r.Case] = true
			if w := want[r.Case]; r.Type != w[0] || !strings.Contains(r.Message, w[1]) {
				t.Errorf("%s: %s %q, want %s with %q", r.Case, r.Type, r.Message, w[0], w[1])
			}
		}
		if len(got) != len(want) {
			t.Errorf("refusals printed %q", out.Stdout)
		}
		if f := skillFiles(t, dir); len(f) != 1 {
			t.Errorf("refused saves left %v", f)
		}

		// Two runs at once save the same name: one wins, whole; the other
		// is told the name is taken.
		var wg sync.WaitGroup
		outs := make([]callOutput, 2)
		sources := make([]string, 2)
		for i := range outs {
			sources[i] = fmt.Sprintf("# writer %d\n", i) + strings.Repeat(fmt.Sprintf("v%d = %d\n", i, i), 300)
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], _ = sessionCall(t, cs, map[string]any{"code": fmt.Sprintf(
					"import mcp_tools\ntry:\n    mcp_tools.save_skill('race', %q)\n    print('won')\nexcept mcp_tools.SkillError as e:\n    print(e.type)", sources[i])})
			}()
		}
		wg.Wait()
		won := -1
		for i, o := range outs {
			switch o.Stdout {
			case "won\n":
				if won >= 0 {
					t.Errorf("both saves won")
				}
				won = i
			case "skill_exists\n":
			default:
				t.Errorf("a racing save: %+v", o)
			}
		}
		if won < 0 {
			t.Fatalf("no save won: %+v", outs)
		}
		show, _, _ = bridgeCLI(t, env, "", "skills", "show", "--policy", pol, "race")
		if !strings.HasSuffix(show, "\n\n"+sources[won]) {
			t.Errorf("the winner's skill is not its source whole:\n%s", show)
		}
		if f := skillFiles(t, dir); len(f) != 2 {
			t.Errorf("after the race the folder holds %v", f)
		}

		// Hostile code that skips save_skill's checks and speaks to the
		// relay itself gets the bridge's own; a source that does not
		// compile is stored then, and a later import says so plainly.
		out, _ = run(`import _bridge_relay as r
for args in ({"name": "../../etc/passwd", "source": "x = 1"}, {"name": "x", "source": 5}, {"name": "os", "source": "x = 1"}):
    try:
        r.query("save_skill", dict(args, description="", signature="", servers=[], overwrite=True))
        print("saved")
    except r.ToolError as e:
        print(e.type)
r.query("save_skill", {"name": "unparsable", "source": "def (", "description": "", "signature": "", "servers": [], "overwrite": False})
try:
    from skills import unparsable
except ImportError as e:
    print("ImportError", "does not compile" in str(e), "bridge skills rm unparsable" in str(e))
`)
		if out.Stdout != "invalid\ninvalid\ninvalid\nImportError True True\n" {
			t.Errorf("raw relay saves: %+v", out)
		}

		// Load on the bridge from the code's side: 200 saves and reads of a
		// skill at the size cap, over the raw relay. The bridge's memory
		// and goroutines stay where they were.
		before := settledStats(t, debugAddr)
		out, _ = run(`import _bridge_relay as r
src = "# " + "x" * 4000 + "\n"
for i in range(200):
    r.query("save_skill", {"name": "heavy", "source": src, "description": "d" * 1024, "signature": "", "servers": ["s"] * 64, "overwrite": True})
    assert r.query("skill_source", {"name": "heavy"})["source"] == src
print("done")
`)
		if out.Stdout != "done\n" {
			t.Fatalf("the save loop: %+v", out)
		}
		after := settledStats(t, debugAddr)
		t.Logf("bridge before/after 400 skill operations: goroutines %d/%d, heap %d/%d KiB, RSS %d/%d MiB",
			before.Goroutines, after.Goroutines, before.HeapAlloc>>10, after.HeapAlloc>>10, before.RSS>>20, after.RSS>>20)
		if after.RSS-before.RSS > 32<<20 || after.Goroutines > before.Goroutines+4 {
			t.Errorf("the bridge grew with skill operations: %+v -> %+v", before, after)
		}

		// A policy that turns saving off: refused, nothing written, and
		// the skills there are can still be imported.
		off := skillsPolicy(t, e, dir, "  save: false\n")
		flags := []string{"run", "--policy", off, "--runtime", e.cand.Engine}
		if !e.enforced {
			flags = append(flags, "--allow-unenforced-limits")
		}
		stdout, errOut, code := bridgeCLI(t, env, "import mcp_tools\nfrom skills import shout\nprint(shout.__doc__.split(',')[0])\n"+
			"try:\n    mcp_tools.save_skill('another', 'x = 1')\nexcept mcp_tools.SkillError as e:\n    print(e.type, e)\n", append(flags, "-")...)
		if code != 0 || !strings.Contains(stdout, "Echoes message through the misbehave server") || !strings.Contains(stdout, "denied skills cannot be saved here") ||
			!strings.Contains(stdout, "skills.save: false") {
			t.Errorf("bridge run with save off: exit %d\n%s%s", code, stdout, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "another.skill.json")); err == nil {
			t.Error("a save with saving off wrote the skill")
		}

		// The default policy lets no run replace a skill: shout stays as
		// reviewed, and who saved it (the client, its run) is on record.
		def := skillsPolicy(t, e, dir, "")
		stdout, errOut, code = bridgeCLI(t, env, "import mcp_tools\ntry:\n    mcp_tools.save_skill('shout', 'x = 1', overwrite=True)\nexcept mcp_tools.SkillError as e:\n    print(e.type, e)\n",
			append([]string{"run", "--policy", def, "--runtime", e.cand.Engine}, append(flags[5:], "-")...)...)
		if code != 0 || !strings.Contains(stdout, "denied") || !strings.Contains(stdout, "skills.overwrite: false") {
			t.Errorf("bridge run replacing a skill by default: exit %d\n%s%s", code, stdout, errOut)
		}
		show, _, _ = bridgeCLI(t, env, "", "skills", "show", "--policy", pol, "shout")
		if !strings.Contains(show, "def shout(message)") || !regexp.MustCompile(`# skill shout, saved .* by .+, run [0-9a-f]+\n`).MatchString(show) {
			t.Errorf("shout after a refused replacement, with who saved it:\n%s", show)
		}

		// bridge skills rm removes it; a run then gets a plain ImportError.
		if _, errOut, code := bridgeCLI(t, env, "", "skills", "rm", "--policy", pol, "race", "unparsable", "heavy"); code != 0 {
			t.Errorf("bridge skills rm: exit %d %s", code, errOut)
		}
		out, _ = run("try:\n    from skills import race\nexcept ImportError as e:\n    print(e)")
		if !strings.Contains(out.Stdout, `no skill is named "race"`) {
			t.Errorf("after rm: %+v", out)
		}
		// The bridge still serves after all that; the suite checks that no
		// container is left once it exits.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "pass"}}); err != nil {
			t.Errorf("the bridge after the attacks: %v", err)
		}
	})
}
