// Package enginetest holds what every engine's tests share: the one table
// of what a hardened sandbox container is, whatever an engine's API calls
// each part. sandbox/docker, sandbox/podman and sandbox/kubernetes each
// hold their container spec against it; a property added here fails every
// engine's test until that engine shows it, or says why it cannot.
package enginetest

import (
	"cmp"
	"fmt"
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

// Check is one check of an engine's container spec: of a property of the
// table, or ("" Property) of the engine's own.
type Check struct {
	Property Property
	// Name names the check among the engine's (default: the property).
	Name string
	// Holds is nil when the spec holds the check, else says what it holds;
	// t is the check's own subtest.
	Holds func(t *testing.T) error
}

// Want is nil when ok, else the error format says.
func Want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// Hardening holds one engine's container against the table. checks are
// the engine's checks of its spec; elsewhere says, for a property the
// spec alone cannot show, where the engine makes it true and which test
// shows it. Every property must be in exactly one of them.
func Hardening(t *testing.T, engine string, checks []Check, elsewhere map[Property]string) {
	t.Helper()
	checked := map[Property]bool{}
	for _, c := range checks {
		if c.Property != "" && !slices.Contains(Properties(), c.Property) {
			t.Errorf("%s: %q is no property of the table", engine, c.Property)
		}
		checked[c.Property] = true
		name := cmp.Or(c.Name, string(c.Property))
		t.Run(name, func(t *testing.T) {
			if err := c.Holds(t); err != nil {
				t.Errorf("%s: %s: %v", engine, name, err)
			}
		})
	}
	for _, p := range Properties() {
		why, other := elsewhere[p]
		switch {
		case checked[p] && other:
			t.Errorf("%s: %q is both checked and said to be made true elsewhere (%s)", engine, p, why)
		case !checked[p] && !other:
			t.Errorf("%s: nothing shows %q: check it in the spec, or say where it is made true and tested", engine, p)
		case other && why == "":
			t.Errorf("%s: %q is made true elsewhere, but the test does not say where", engine, p)
		}
	}
	for p := range elsewhere {
		if !slices.Contains(Properties(), p) {
			t.Errorf("%s: %q is no property of the table", engine, p)
		}
	}
}
