package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
)

func cmdDoctor(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "doctor", "[flags]", "Checks each container engine the bridge could use: reachable, rootless or\n"+
		"rootful, cgroup version, which limits hold, the runner image; then runs a smoke\n"+
		"test that proves the sandbox from inside. Exits 1 when no engine can run code safely.")
	engine := fs.String("runtime", sandbox.EngineAuto, "engine to check: auto (all), podman or docker")
	ociRuntime := fs.String("oci-runtime", sandbox.OCIRuntimeDefault, "OCI runtime the smoke test must run under: default, runc or runsc\n"+
		"(with runsc, an engine that cannot run gVisor is not usable)")
	image := fs.String("image", images.Name(), "runner image")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	allow := fs.Bool("allow-unenforced-limits", false, "count an engine that cannot enforce limits as usable")
	policyPath := fs.String("policy", "", "check against this policy `FILE`: its engine, oci_runtime, image and require_enforced_limits\n(a policy that requires limits the engine cannot enforce is reported here, before serve refuses to run)")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if fs.NArg() != 0 {
		return exitUsage, usagef("takes no arguments")
	}
	if err := checkOCIRuntime(*ociRuntime); err != nil {
		return exitUsage, err
	}
	if *policyPath != "" {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "runtime" || f.Name == "oci-runtime" || f.Name == "image" || f.Name == "allow-unenforced-limits" {
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return exitUsage, usagef("%s is given with --policy: the policy says it", strings.Join(set, ", "))
		}
		p, err := policy.Load(*policyPath)
		if err != nil {
			return exitUsage, err
		}
		*engine, *ociRuntime, *allow = p.Sandbox.Engine, p.Sandbox.OCIRuntime, !p.Sandbox.RequireEnforcedLimits
		if p.Sandbox.Image != "" {
			*image = p.Sandbox.Image
		}
		req := "requires enforced memory, pids and CPU limits (an engine that cannot enforce them fails)"
		if *allow {
			req = "accepts engines that cannot enforce limits (require_enforced_limits: false)"
		}
		if !*asJSON {
			fmt.Fprintf(e.stdout, "policy %s: engine %s, OCI runtime %s; %s\n\n", *policyPath, *engine, *ociRuntime, req)
		}
	}
	rep, err := doctor.Run(ctx, doctor.Options{
		Engine: *engine, Image: *image, AllowUnenforcedLimits: *allow, OCIRuntime: *ociRuntime, Logger: e.log,
	})
	if err != nil {
		return exitUsage, usagef("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
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
