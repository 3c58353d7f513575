package main

import (
	"fmt"
	"io"

	"github.com/bridge-mcp/bridge/policy"
)

// mountReport is one of the policy's mounts as doctor shows it: where it
// goes, and whether the sandbox's user can read it.
type mountReport struct {
	Host     string `json:"host"`
	Path     string `json:"path"`
	Readable bool   `json:"readable"`
	// Problem says what keeps the code from reading it, and the fix.
	Problem string `json:"problem,omitempty"`
}

func mountReports(p *policy.Policy) []mountReport {
	out := make([]mountReport, 0, len(p.Mounts))
	for _, m := range p.Mounts {
		why := m.Readable()
		out = append(out, mountReport{Host: m.Host, Path: m.Path, Readable: why == "", Problem: why})
	}
	return out
}

// writeMounts lists the policy's mounts for people, with a note where an
// OCI runtime cannot hold them.
func writeMounts(w io.Writer, p *policy.Policy, ms []mountReport) {
	if len(ms) == 0 {
		return
	}
	fmt.Fprintf(w, "mounts (read-only, nosuid, nodev, noexec, under %s/):\n", policy.DataDir)
	for _, m := range ms {
		if m.Readable {
			fmt.Fprintf(w, "  %s → %s: readable by the sandbox's user\n", m.Host, m.Path)
		} else {
			fmt.Fprintf(w, "  %s → %s: NOT readable by the sandbox's user: %s\n", m.Host, m.Path, m.Problem)
		}
	}
	if p.Sandbox.OCIRuntime == "runsc" {
		fmt.Fprintln(w, "  note: under gVisor only Podman can hold these mounts noexec; Docker refuses to run code with them (docs/security.md)")
	}
}

// mountWarnings are the policy's mounts that the sandbox's user cannot
// read, as "file:line:col: warning: ..." lines.
func mountWarnings(p *policy.Policy) []string {
	var out []string
	for i, m := range p.Mounts {
		if why := m.Readable(); why != "" {
			pr := policy.Problem{File: orDefaults(p.Source), Line: m.Line, Column: m.Column,
				Message: fmt.Sprintf("warning: mounts[%d]: the code cannot read it: %s", i, why)}
			out = append(out, pr.String())
		}
	}
	return out
}
