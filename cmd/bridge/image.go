package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox/detect"
)

const imageUsage = `Usage:
  bridge image build [--runtime ENGINE] [--variant V]   build a runner image through an engine
  bridge image build [--variant V] --apt PKG... --wheels DIR
                                      a custom image: a variant plus Debian packages and local wheels
  bridge image name [--variant V] [--apt PKG... --wheels DIR]
                                      print the image that build makes
Variants: slim (the default: python3 and the runner), datascience (slim plus
Debian's numpy, pandas, matplotlib, scipy, scikit-learn, Pillow, openpyxl,
tabulate, Jinja2).
A policy picks one with sandbox.variant, or names any image with sandbox.image;
docs/images.md says what each holds and how to add your own packages.
Run ` + "`bridge image build -h`" + ` for its flags.
`

// imageFlags are the flags build and name share: what image to make.
type imageFlags struct {
	variant string
	apt     []string
	wheels  string
}

func (f *imageFlags) add(fs *flag.FlagSet) {
	f.variant = images.Slim
	fs.Func("variant", "the runner image's `variant`: "+strings.Join(images.Variants(), " or ")+" (default "+images.Slim+")", func(v string) error {
		if err := images.CheckVariant(v); err != nil {
			return err
		}
		f.variant = v
		return nil
	})
	fs.Func("apt", "Debian `packages` to add (names, comma- or space-separated; the flag may be repeated):\n"+
		"installed from Debian's mirror at build time, into a custom image", func(v string) error {
		if _, err := images.SplitPackages([]string{v}); err != nil {
			return err
		}
		f.apt = append(f.apt, v)
		return nil
	})
	fs.StringVar(&f.wheels, "wheels", "", "a `folder` of Python wheels (.whl) to add, with their dependencies: installed at build\n"+
		"time with pip --no-index from that folder alone, into a custom image")
}

// custom reports whether the flags ask for a custom image, and which.
func (f *imageFlags) custom() (images.Custom, bool) {
	c := images.Custom{Variant: f.variant, Apt: f.apt, WheelsDir: f.wheels}
	return c, len(f.apt) > 0 || f.wheels != ""
}

// name is the image the flags name.
func (f *imageFlags) name() (string, error) {
	if c, ok := f.custom(); ok {
		return c.Name()
	}
	return images.NameOf(f.variant), nil
}

func cmdImage(ctx context.Context, e *env, args []string) (int, error) {
	if len(args) == 0 {
		return exitUsage, usagef("want a subcommand: build or name")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, imageUsage)
		return 0, nil
	case "name":
		fs := newFlagSet(e, "image name", "[flags]", "Prints the reference of the image `bridge image build` makes with the same flags\n"+
			"(the default: "+images.Name()+").")
		var f imageFlags
		f.add(fs)
		rest, err := parseFlags(fs, args[1:])
		if err != nil {
			return exitUsage, err
		}
		if len(rest) != 0 {
			return exitUsage, usagef("image name takes no arguments, got %s", quoteArgs(rest))
		}
		name, err := f.name()
		if err != nil {
			return exitUsage, usagef("%v", err)
		}
		fmt.Fprintln(e.stdout, name)
		return 0, nil
	case "build":
		fs := newFlagSet(e, "image build", "[flags]", "Builds a runner image through the engine's API from the build context built\n"+
			"into this binary, and prints its name: "+images.Name()+" (slim, the default),\n"+
			images.NameOf(images.DataScience)+" (--variant datascience).\n"+
			"The base image (debian:bookworm-slim) must be present or pullable; the build\n"+
			"installs Debian's packages from Debian's mirror.\n\n"+
			"With --apt or --wheels it builds a custom image: the variant plus those\n"+
			"packages, tagged "+images.Repository+":custom-HASH (a hash of the variant, the\n"+
			"package names and the wheels' bytes). Select it with sandbox.image in a\n"+
			"policy, or --image. See docs/images.md.")
		var sf settingFlags
		sf.add(fs, "runtime", "sandbox.engine", "container `engine`: auto, podman or docker")
		var f imageFlags
		f.add(fs)
		rest, err := parseFlags(fs, args[1:])
		if err != nil {
			return exitUsage, err
		}
		if len(rest) != 0 {
			return exitUsage, usagef("image build takes no arguments, got %s", quoteArgs(rest))
		}
		c, custom := f.custom()
		if custom {
			// Check the packages and wheels before reaching for an engine.
			if _, err := c.Name(); err != nil {
				return exitUsage, usagef("%v", err)
			}
		}
		// The image is built for whichever engine runs code: a policy
		// does not restrict that, so the flag alone says which.
		p, err := policy.Default().With(sf.set, policy.Replace)
		if err != nil {
			return exitUsage, usagef("%v", err)
		}
		rt, err := detect.Open(ctx, p.Sandbox.Engine, e.log)
		if err != nil {
			return exitBridge, err
		}
		defer rt.Close()
		start := time.Now()
		var name string
		if custom {
			name, err = images.BuildCustom(ctx, rt, c, e.stderr)
		} else {
			name, err = images.Build(ctx, rt, f.variant, e.stderr)
		}
		if err != nil {
			return exitBridge, err
		}
		fmt.Fprintf(e.stderr, "built %s with %s in %s\n", name, rt.Name(), timeSince(start))
		switch {
		case custom:
			fmt.Fprintf(e.stderr, "run code in it: `sandbox.image: %s` in policy.yaml, or `--image %s`\n", name, name)
		case f.variant != images.Slim:
			fmt.Fprintf(e.stderr, "run code in it: `sandbox.variant: %s` in policy.yaml, or `--variant %s`\n", f.variant, f.variant)
		}
		fmt.Fprintln(e.stdout, name)
		return 0, nil
	}
	return exitUsage, usagef("unknown image subcommand %q: want build or name", args[0])
}
