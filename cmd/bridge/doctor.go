package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
)

func cmdDoctor(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "doctor", "[flags]", "Checks each container engine the bridge could use: reachable, rootless or\n"+
		"rootful, cgroup version, which limits hold, the runner image; then runs a smoke\n"+
		"test that proves the sandbox from inside. Exits 1 when no engine can run code safely.")
	var sf settingFlags
	sf.engine(fs)
	fs.Lookup("runtime").Usage = "`engine` to check: auto (every one), podman, docker, kubernetes or runsc"
	sf.add(fs, "image", "sandbox.image", "runner `image`")
	sf.variant(fs)
	sf.addBool(fs, "allow-unenforced-limits", "sandbox.require_enforced_limits", "count an engine that cannot enforce limits as usable")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	policyPath := fs.String("policy", "", "check against this policy `FILE` (default "+defaultPolicyPath()+" if it exists): its engine,\n"+
		"oci_runtime, image and require_enforced_limits (a policy that requires limits the engine cannot\n"+
		"enforce is reported here, before serve refuses to run), and lists its mounts and whether the\n"+
		"sandbox's user can read them; the flags above may only tighten it")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	p, file, err := loadPolicy(e, *policyPath, sf.set, nil)
	if err != nil {
		return exitUsage, err
	}
	image := runnerImage(p)
	if !*asJSON {
		req := "requires enforced memory, pids and CPU limits (an engine that cannot enforce them fails)"
		if !p.Sandbox.RequireEnforcedLimits {
			req = "accepts engines that cannot enforce limits (require_enforced_limits: false)"
		}
		name := file
		if name == "" {
			name = fmt.Sprintf("(none at %s: the built-in defaults, as bridge serve would use them)", defaultPolicyPath())
		}
		fmt.Fprintf(e.stdout, "policy %s: engine %s, OCI runtime %s; %s\n", name, p.Sandbox.Engine, p.Sandbox.OCIRuntime, req)
		pool := "off (pool.size 0): every run starts its container"
		if p.Pool.Size > 0 {
			pool = fmt.Sprintf("%d ready container(s) kept by bridge serve, up to %d under load (back to %d after %s), each replaced after %s",
				p.Pool.Size, p.Pool.Max, p.Pool.Size, units.FormatDuration(p.Pool.ShrinkAfter), units.FormatDuration(p.Pool.MaxAge))
		}
		fmt.Fprintf(e.stdout, "warm pool: %s\n", pool)
		sessions := "off (sessions.enabled false): every call runs in a fresh container"
		if s := p.Sessions; s.Enabled {
			sessions = fmt.Sprintf("on: at most %d at once, each ended after %s idle, %s or %d calls",
				s.Max, units.FormatDuration(s.IdleTimeout), units.FormatDuration(s.MaxLifetime), s.MaxCalls)
		}
		fmt.Fprintf(e.stdout, "sessions: %s\n", sessions)
		fmt.Fprintf(e.stdout, "skills: %s\n", skillsLine(p.Skills))
		writeMounts(e.stdout, p, mountReports(p))
		fmt.Fprintln(e.stdout)
	}
	rep, err := doctor.Run(ctx, doctor.Options{
		Engine: p.Sandbox.Engine, Image: image, AllowUnenforcedLimits: !p.Sandbox.RequireEnforcedLimits,
		OCIRuntime: p.Sandbox.OCIRuntime, Logger: e.log,
	})
	if err != nil {
		return exitUsage, usagef("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		out := struct {
			doctor.Report
			Mounts []mountReport `json:"mounts,omitempty"`
		}{rep, mountReports(p)}
		if err := enc.Encode(out); err != nil {
			return exitBridge, err
		}
	} else {
		doctor.WriteText(e.stdout, rep)
	}
	if !rep.OK {
		return 1, nil
	}
	return 0, nil
}
