package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
)

func cmdImage(ctx context.Context, e *env, args []string) (int, error) {
	if len(args) == 0 {
		return exitUsage, usagef("want a subcommand: build or name")
	}
	switch args[0] {
	case "name":
		if len(args) != 1 {
			return exitUsage, usagef("image name takes no arguments")
		}
		fmt.Fprintln(e.stdout, images.Name())
		return 0, nil
	case "build":
		fs := newFlagSet(e, "image build", "[flags]", "Builds the runner image ("+images.Name()+")\n"+
			"through the engine's API from the build context built into this binary.\n"+
			"The base image (debian:bookworm-slim) must be present or pullable.")
		engine := fs.String("runtime", sandbox.EngineAuto, "container engine: auto, podman or docker")
		if err := parseFlags(fs, args[1:]); err != nil {
			return exitUsage, err
		}
		if fs.NArg() != 0 {
			return exitUsage, usagef("image build takes no arguments")
		}
		if err := checkRuntime(*engine); err != nil {
			return exitUsage, err
		}
		rt, err := sandbox.Open(ctx, *engine, e.log)
		if err != nil {
			return exitBridge, err
		}
		defer rt.Close()
		start := time.Now()
		name, err := images.Build(ctx, rt, e.stderr)
		if err != nil {
			return exitBridge, err
		}
		fmt.Fprintf(e.stderr, "built %s with %s in %s\n", name, rt.Name(), timeSince(start))
		fmt.Fprintln(e.stdout, name)
		return 0, nil
	}
	return exitUsage, usagef("unknown image subcommand %q: want build or name", args[0])
}
