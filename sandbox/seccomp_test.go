package sandbox

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

func TestTightenSeccomp(t *testing.T) {
	def := []byte(`{
  "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1, "archMap": [{"architecture": "SCMP_ARCH_X86_64"}],
  "syscalls": [
    {"names": ["read", "unshare", "clone", "keyctl", "write"], "action": "SCMP_ACT_ALLOW", "args": [], "comment": "kept"},
    {"names": ["setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
    {"names": ["clone3", "add_key", "request_key"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}
  ]}`)
	got, err := tightenSeccomp(def)
	if err != nil {
		t.Fatal(err)
	}
	var prof struct {
		DefaultAction   string           `json:"defaultAction"`
		DefaultErrnoRet int              `json:"defaultErrnoRet"`
		ArchMap         []map[string]any `json:"archMap"`
		Syscalls        []struct {
			Names    []string         `json:"names"`
			Action   string           `json:"action"`
			Args     []map[string]any `json:"args"`
			ErrnoRet *int             `json:"errnoRet"`
			Comment  string           `json:"comment"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(got, &prof); err != nil {
		t.Fatal(err)
	}
	if prof.DefaultAction != "SCMP_ACT_ERRNO" || prof.DefaultErrnoRet != 1 || len(prof.ArchMap) != 1 {
		t.Fatalf("the profile's other keys changed: %s", got)
	}
	allowed := map[string]int{}
	var cloneArgs []map[string]any
	clone3 := -1
	for _, r := range prof.Syscalls {
		for _, n := range r.Names {
			if r.Action == "SCMP_ACT_ALLOW" {
				allowed[n]++
				if n == "clone" {
					cloneArgs = r.Args
				}
			}
			if n == "clone3" && r.Action == "SCMP_ACT_ERRNO" && r.ErrnoRet != nil {
				clone3 = *r.ErrnoRet
			}
		}
	}
	for _, n := range []string{"unshare", "setns", "keyctl", "add_key", "request_key", "clone3"} {
		if allowed[n] > 0 {
			t.Errorf("%s is still allowed", n)
		}
	}
	if allowed["read"] != 1 || allowed["write"] != 1 {
		t.Errorf("other calls lost: %v", allowed)
	}
	if allowed["clone"] != 1 || len(cloneArgs) != 1 || cloneArgs[0]["op"] != "SCMP_CMP_MASKED_EQ" ||
		cloneArgs[0]["value"] != float64(cloneNamespaceFlags) || cloneArgs[0]["valueTwo"] != float64(0) {
		t.Errorf("clone must be allowed only without namespace flags: %v", cloneArgs)
	}
	if clone3 != errnoENOSYS {
		t.Errorf("clone3 must fail with ENOSYS, got %d", clone3)
	}
	if _, err := tightenSeccomp([]byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[]}`)); err == nil {
		t.Error("an allow-by-default profile was accepted")
	}
}

// The profile of this machine's Podman, if it has one, tightens, and is
// written once, private to the user.
func TestPodmanSeccompProfile(t *testing.T) {
	found := slices.ContainsFunc(podmanSeccompDefaults, func(p string) bool { _, err := os.Stat(p); return err == nil })
	if !found {
		t.Skip("no containers-common seccomp profile on this machine")
	}
	dir := t.TempDir() + "/runs"
	p1, err := podmanSeccompProfile(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := podmanSeccompProfile(dir)
	if err != nil || p1 != p2 {
		t.Fatalf("%s, %s, %v", p1, p2, err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the profile's directory: %v %v", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d files in the directory, want the profile alone", len(ents))
	}
}
