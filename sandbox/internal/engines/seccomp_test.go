package engines

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

func TestSeccompProfile(t *testing.T) {
	var prof struct {
		DefaultAction   string           `json:"defaultAction"`
		DefaultErrnoRet int              `json:"defaultErrnoRet"`
		ArchMap         []map[string]any `json:"archMap"`
		Syscalls        []struct {
			Names    []string         `json:"names"`
			Action   string           `json:"action"`
			Args     []map[string]any `json:"args"`
			ErrnoRet int              `json:"errnoRet"`
			Includes map[string]any   `json:"includes"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(SeccompProfile(), &prof); err != nil {
		t.Fatal(err)
	}
	if prof.DefaultAction != "SCMP_ACT_ERRNO" || prof.DefaultErrnoRet != errnoENOSYS || len(prof.ArchMap) == 0 {
		t.Fatalf("the profile must refuse what it does not list: %+v", prof)
	}
	allowed := map[string]int{}
	refused := map[string]int{}
	var cloneArgs []map[string]any
	for _, r := range prof.Syscalls {
		for _, n := range r.Names {
			switch r.Action {
			case "SCMP_ACT_ALLOW":
				if len(r.Args) == 0 && r.Includes == nil {
					allowed[n]++
				}
				if n == "clone" {
					cloneArgs = r.Args
				}
			case "SCMP_ACT_ERRNO":
				refused[n] = r.ErrnoRet
			default:
				t.Errorf("%s: action %s", n, r.Action)
			}
		}
	}
	for n, c := range allowed {
		if c != 1 {
			t.Errorf("%s is listed %d times", n, c)
		}
		if _, ok := refused[n]; ok {
			t.Errorf("%s is both allowed and refused", n)
		}
	}
	for _, n := range []string{"unshare", "setns", "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root", "bpf", "kexec_load", "init_module", "userfaultfd"} {
		if refused[n] != errnoEPERM {
			t.Errorf("%s: refused with %d, want EPERM", n, refused[n])
		}
	}
	if refused["clone3"] != errnoENOSYS {
		t.Errorf("clone3 must fail with ENOSYS, got %d", refused["clone3"])
	}
	for _, n := range []string{"read", "write", "openat", "mmap", "futex", "socket", "connect", "execve", "wait4", "rt_sigreturn"} {
		if allowed[n] != 1 {
			t.Errorf("%s is not allowed: a Python program needs it", n)
		}
	}
	if allowed["clone"] != 0 || len(cloneArgs) != 1 || cloneArgs[0]["op"] != "SCMP_CMP_MASKED_EQ" ||
		cloneArgs[0]["value"] != float64(cloneNamespaceFlags) || cloneArgs[0]["valueTwo"] != float64(0) {
		t.Errorf("clone must be allowed only without namespace flags: %v", cloneArgs)
	}
	if !slices.IsSorted(seccompAllowed) {
		t.Error("seccompAllowed is not sorted: keep it so, to review it")
	}
}

// The profile is written once, named by its content, private to the user.
func TestSeccompProfileFile(t *testing.T) {
	dir := t.TempDir() + "/runs"
	p1, err := SeccompProfileFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := SeccompProfileFile(dir)
	if err != nil || p1 != p2 {
		t.Fatalf("%s, %s, %v", p1, p2, err)
	}
	b, err := os.ReadFile(p1)
	if err != nil || string(b) != string(SeccompProfile()) {
		t.Fatalf("the file is not the profile: %v", err)
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
