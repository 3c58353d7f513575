package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

func cmdImage(ctx context.Context, e *env, args []string) (int, error) {
	if len(args) == 0 {
		return exitUsage, usagef("want a subcommand: build or name")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, "Usage:\n  bridge image build [--runtime ENGINE]   build the runner image through an engine\n"+
			"  bridge image name                       print the runner image this binary runs ("+images.Name()+")\n")
		return 0, nil
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
		var sf settingFlags
		sf.add(fs, "runtime", "sandbox.engine", "container engine: auto, podman or docker")
		rest, err := parseFlags(fs, args[1:])
		if err != nil {
			return exitUsage, err
		}
		if len(rest) != 0 {
			return exitUsage, usagef("image build takes no arguments, got %s", quoteArgs(rest))
		}
		// The image is built for whichever engine runs code: a policy
		// does not restrict that, so the flag alone says which.
		p, err := policy.Default().With(sf.set, policy.Replace)
		if err != nil {
			return exitUsage, usagef("%v", err)
		}
		rt, err := sandbox.Open(ctx, p.Sandbox.Engine, e.log)
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
