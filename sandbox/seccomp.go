package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Podman's default seccomp profile (containers-common) is made for nested
// containers: it lets any process unshare a user namespace, which gives it
// every capability inside, and use the kernel's keyrings. Docker's default
// refuses both to a container without CAP_SYS_ADMIN. The bridge runs Podman
// containers under a tightened copy of the engine's own default profile:
//
//   - unshare, setns, keyctl, add_key and request_key are not allowed;
//   - clone is allowed only without namespace flags (CLONE_NEWNS,
//     NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET);
//   - clone3, whose flags seccomp cannot read, fails with ENOSYS, so that
//     the C library falls back to clone (Docker does the same).
//
// Everything else stays as the engine's default has it.

// podmanSeccompDefaults are where containers-common installs the profile.
var podmanSeccompDefaults = []string{"/etc/containers/seccomp.json", "/usr/share/containers/seccomp.json"}

const (
	// cloneNamespaceFlags are the clone flags that make new namespaces.
	cloneNamespaceFlags = 0x7E020000
	errnoENOSYS         = 38
)

// seccompDenied are the system calls the tightened profile no longer allows.
var seccompDenied = []string{"unshare", "setns", "keyctl", "add_key", "request_key", "clone", "clone3"}

// tightenSeccomp returns the profile def (OCI seccomp JSON, as Podman and
// Docker read it) with the changes above. Keys it does not know are kept.
func tightenSeccomp(def []byte) ([]byte, error) {
	var prof map[string]json.RawMessage
	if err := json.Unmarshal(def, &prof); err != nil {
		return nil, fmt.Errorf("reading the seccomp profile: %w", err)
	}
	var action string
	if err := json.Unmarshal(prof["defaultAction"], &action); err != nil || action == "SCMP_ACT_ALLOW" || action == "" {
		return nil, fmt.Errorf("the seccomp profile's default action is %q: only a profile that refuses what it does not list can be tightened", action)
	}
	var rules []map[string]json.RawMessage
	if err := json.Unmarshal(prof["syscalls"], &rules); err != nil {
		return nil, fmt.Errorf("reading the seccomp profile's syscalls: %w", err)
	}
	kept := rules[:0]
	for _, r := range rules {
		var names []string
		if err := json.Unmarshal(r["names"], &names); err != nil {
			return nil, fmt.Errorf("reading a seccomp rule's names: %w", err)
		}
		names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(seccompDenied, n) })
		if len(names) == 0 {
			continue
		}
		b, _ := json.Marshal(names)
		r["names"] = b
		kept = append(kept, r)
	}
	raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	kept = append(kept,
		map[string]json.RawMessage{
			"names":  raw([]string{"clone"}),
			"action": raw("SCMP_ACT_ALLOW"),
			"args":   raw([]map[string]any{{"index": 0, "value": cloneNamespaceFlags, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}}),
		},
		map[string]json.RawMessage{
			"names":    raw([]string{"clone3"}),
			"action":   raw("SCMP_ACT_ERRNO"),
			"errnoRet": raw(errnoENOSYS),
		},
	)
	prof["syscalls"] = raw(kept)
	return json.MarshalIndent(prof, "", "  ")
}

// podmanSeccompProfile writes the tightened copy of the engine's default
// profile into dir (private to the bridge's user; the Podman service, root
// or this user, reads it) and returns its path. The file is named by its
// content, so every run and every bridge of this user shares it.
func podmanSeccompProfile(dir string) (string, error) {
	var def []byte
	var err error
	for _, p := range podmanSeccompDefaults {
		if def, err = os.ReadFile(p); err == nil {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("podman's default seccomp profile is not at %v (package containers-common): the bridge runs Podman containers only under a tightened copy of it", podmanSeccompDefaults)
	}
	prof, err := tightenSeccomp(def)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(prof)
	path := filepath.Join(dir, "seccomp-"+hex.EncodeToString(sum[:8])+".json")
	if b, err := os.ReadFile(path); err == nil && string(b) == string(prof) {
		return path, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := ensurePrivateDir(dir); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".seccomp-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(prof); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}
