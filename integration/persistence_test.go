package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// persistPlant is code that plants auto-run code for later runs in every
// place Python or a shell would pick it up: each planted file, if it ever
// runs, prints "PERSIST-MARKER <label>" and leaves /tmp/persist-marker-<label>.
// It prints "plant_<label> <outcome>" for each.
const persistPlant = `
import errno, os, site, sys
def py(label):
    return "import os; print('PERSIST-MARKER %s'); open('/tmp/persist-marker-%s', 'w').close()\n" % (label, label)
def sh(label):
    return "echo PERSIST-MARKER %s; touch /tmp/persist-marker-%s\n" % (label, label)
plants = [("sitecustomize", "/tmp/sitecustomize.py", py("sitecustomize")),
          ("usercustomize", "/tmp/usercustomize.py", py("usercustomize")),
          ("bashrc", os.path.expanduser("~/.bashrc"), sh("bashrc")),
          ("profile_d", "/etc/profile.d/x.sh", sh("profile_d")),
          ("cron_d", "/etc/cron.d/x", "* * * * * root " + sh("cron_d")),
          ("pythonstartup", "/tmp/startup.py", py("pythonstartup"))]
dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
for i, d in enumerate(dirs):
    # A .pth line that starts with "import" is run by site at start-up.
    plants.append(("pth%d" % i, os.path.join(d, "x.pth"), py("pth%d" % i)))
for label, path, content in plants:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content)
        print("plant_" + label, "OK")
    except OSError as e:
        print("plant_" + label, errno.errorcode.get(e.errno, str(e.errno)))
os.environ["PYTHONSTARTUP"] = "/tmp/startup.py"
print("planted", " ".join(p for _, p, _ in plants))
`

// persistCheck is code that looks for what persistPlant left or ran.
const persistCheck = `
import os, site, sys
planted = ["/tmp/sitecustomize.py", "/tmp/usercustomize.py", os.path.expanduser("~/.bashrc"), "/etc/profile.d/x.sh",
           "/etc/cron.d/x", "/tmp/startup.py"] + [os.path.join(d, "x.pth") for d in list(site.getsitepackages()) + [site.getusersitepackages()]]
markers = [n for n in os.listdir("/tmp") if n.startswith("persist-marker-")]
def from_tmp(name):
    f = getattr(sys.modules.get(name), "__file__", None) or ""
    return f.startswith("/tmp")
print("planted_left", " ".join(p for p in planted if os.path.exists(p)) or "none")
print("markers", " ".join(markers) or "none")
print("sitecustomize_from_tmp", from_tmp("sitecustomize"))
print("usercustomize_from_tmp", from_tmp("usercustomize"))
print("tmp_entries", " ".join(sorted(n for n in os.listdir("/tmp") if n != "outputs")) or "none")
`

// TestPersistenceAcrossRuns: code that plants auto-run code (sitecustomize,
// .pth files, shell start-up files, cron) reaches no later run, which gets a
// fresh container; and in a named session, whose /tmp is kept by design,
// what it planted never runs by itself on the next call.
func TestPersistenceAcrossRuns(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		// The pool on, as users run it (the default size), with sessions.
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + "sessions:\n  enabled: true\n  idle_timeout: 60s\n"
		if err := os.WriteFile(policy, []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		cs, _, _ := connectStdioArgs(t, e, nil, "--policy", policy)
		call := func(args map[string]any) map[string]string {
			t.Helper()
			out, text := sessionCall(t, cs, args)
			if out.Status != "ok" {
				t.Fatalf("status %q: %s\n%s\n%s", out.Status, out.Message, out.Stdout, text)
			}
			if strings.Contains(out.Stdout+out.Stderr, "PERSIST-MARKER") {
				t.Errorf("planted code ran: %s%s", out.Stdout, out.Stderr)
			}
			lines := map[string]string{}
			for _, l := range strings.Split(out.Stdout, "\n") {
				k, v, _ := strings.Cut(l, " ")
				lines[k] = v
			}
			return lines
		}
		want := func(lines map[string]string, key, value string) {
			t.Helper()
			if lines[key] != value {
				t.Errorf("%s: %q, want %q", key, lines[key], value)
			}
		}

		run1 := call(map[string]any{"code": persistPlant})
		// The planting itself works in /tmp (the code's own) and nowhere
		// else: what follows proves that /tmp does not outlive the run.
		want(run1, "plant_sitecustomize", "OK")
		want(run1, "plant_usercustomize", "OK")
		want(run1, "plant_bashrc", "OK") // HOME is /tmp
		for _, k := range []string{"plant_profile_d", "plant_cron_d"} {
			if v := run1[k]; v != "EROFS" && v != "EACCES" {
				t.Errorf("%s: %q, want EROFS or EACCES", k, v)
			}
		}
		t.Logf("run 1 planted: %v", run1)
		// Three later runs: the pool's containers made before run 1, and
		// one made after it.
		for i := range 3 {
			later := call(map[string]any{"code": persistCheck})
			for _, k := range []string{"planted_left", "markers", "tmp_entries"} {
				want(later, k, "none")
			}
			want(later, "sitecustomize_from_tmp", "False")
			want(later, "usercustomize_from_tmp", "False")
			if t.Failed() {
				t.Fatalf("run %d after the planting: %v", i+2, later)
			}
		}

		// A named session keeps its /tmp: the planted files stay there, as
		// files, and never run by themselves on the next call.
		call(map[string]any{"code": persistPlant, "session": "persist"})
		next := call(map[string]any{"code": persistCheck + `
print("sitecustomize_kept", os.path.isfile("/tmp/sitecustomize.py"))
`, "session": "persist"})
		want(next, "sitecustomize_kept", "True")
		want(next, "markers", "none")
		want(next, "sitecustomize_from_tmp", "False")
		want(next, "usercustomize_from_tmp", "False")
		// A new run beside the session sees none of it.
		fresh := call(map[string]any{"code": persistCheck})
		want(fresh, "planted_left", "none")
		want(fresh, "tmp_entries", "none")
	})
}
