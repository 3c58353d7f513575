package main

import (
	"context"
	"encoding/json"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
)

func cmdDoctor(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "doctor", "[flags]", "Checks each container engine the bridge could use: reachable, rootless or\n"+
		"rootful, cgroup version, which limits hold, the runner image; then runs a smoke\n"+
		"test that proves the sandbox from inside. Exits 1 when no engine can run code safely.")
	engine := fs.String("runtime", sandbox.EngineAuto, "engine to check: auto (all), podman or docker")
	image := fs.String("image", images.Name(), "runner image")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	allow := fs.Bool("allow-unenforced-limits", false, "count an engine that cannot enforce limits as usable")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if fs.NArg() != 0 {
		return exitUsage, usagef("takes no arguments")
	}
	rep, err := doctor.Run(ctx, doctor.Options{
		Engine: *engine, Image: *image, AllowUnenforcedLimits: *allow, Logger: e.log,
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
