// Package enginetest holds what every engine's tests share: the one table
// of what a hardened sandbox container is, whatever an engine's API calls
// each part. sandbox/docker, sandbox/podman and sandbox/kubernetes each
// hold their container spec against it; a property added here fails every
// engine's test until that engine shows it, or says why it cannot.
package enginetest

import (
	"slices"
	"testing"
)

// Property is one thing every engine makes true of a sandbox container.
type Property string

// The properties of a hardened container, as docs/security.md lists them.
const (
	Image         Property = "the runner image, with the command exactly as asked (no image entrypoint)"
	Nobody        Property = "runs as 65534:65534"
	ReadOnlyRoot  Property = "read-only root file system"
	NoNetwork     Property = "no network"
	NoCapability  Property = "every capability dropped, none added"
	NoEscalation  Property = "no privilege escalation, not privileged"
	Seccomp       Property = "the bridge's own seccomp profile"
	Memory        Property = "memory limited, and no swap beyond it"
	CPU           Property = "CPU limited"
	Pids          Property = "processes limited"
	Rlimits       Property = "rlimits for open files and processes"
	TmpNoExec     Property = "/tmp a sized tmpfs, noexec, nosuid, nodev"
	RelayReadOnly Property = "the run folder (relay socket) mounted read-only"
	OnlyMounts    Property = "no mount but the run folder, /tmp and the policy's data"
	Init          Property = "an init reaps orphans"
	Env           Property = "the environment is the spec's: nothing of the host's"
	Labels        Property = "labelled as the bridge's, with the run id"
	OCIRuntime    Property = "the OCI runtime asked for"
)

// Properties are all of them, in the order above.
func Properties() []Property {
	return []Property{Image, Nobody, ReadOnlyRoot, NoNetwork, NoCapability, NoEscalation, Seccomp,
		Memory, CPU, Pids, Rlimits, TmpNoExec, RelayReadOnly, OnlyMounts, Init, Env, Labels, OCIRuntime}
}

// Hardening holds one engine's container against the table: checks says,
// for a property, whether the engine's spec has it (nil error); elsewhere
// says, for a property the spec alone cannot show, where it is made true
// and tested instead. Every property must be in exactly one of them.
func Hardening(t *testing.T, engine string, checks map[Property]func() error, elsewhere map[Property]string) {
	t.Helper()
	for _, p := range Properties() {
		check, checked := checks[p]
		why, other := elsewhere[p]
		switch {
		case checked && other:
			t.Errorf("%s: %q is both checked and said to be made true elsewhere (%s)", engine, p, why)
		case !checked && !other:
			t.Errorf("%s: nothing shows %q: check it in the spec, or say where it is made true", engine, p)
		case other && why == "":
			t.Errorf("%s: %q is made true elsewhere, but the test does not say where", engine, p)
		case checked:
			t.Run(string(p), func(t *testing.T) {
				if err := check(); err != nil {
					t.Errorf("%s: %s: %v", engine, p, err)
				}
			})
		}
	}
	for p := range checks {
		if !slices.Contains(Properties(), p) {
			t.Errorf("%s: %q is no property of the table", engine, p)
		}
	}
	for p := range elsewhere {
		if !slices.Contains(Properties(), p) {
			t.Errorf("%s: %q is no property of the table", engine, p)
		}
	}
}
