package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/detect"
)

// `bridge policy check` and `bridge policy explain`. Loading the policy,
// which every command does, is policyload.go.

func cmdPolicy(ctx context.Context, e *env, args []string) (int, error) {
	const usage = "Usage:\n  bridge policy check [FILE]                      validate a policy and print it, every default filled in\n" +
		"  bridge policy explain [--policy FILE] SERVER TOOL   which rule decides whether the code may call SERVER's TOOL\n" +
		"Run `bridge policy check -h` or `bridge policy explain -h` for their flags; docs/policy.md is the reference.\n"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(e.stdout, usage)
		return 0, nil
	}
	if len(args) == 0 || (args[0] != "check" && args[0] != "explain") {
		return exitUsage, usagef("want `bridge policy check [FILE]` or `bridge policy explain [--policy FILE] SERVER TOOL`")
	}
	if args[0] == "check" {
		return policyCheck(ctx, e, args[1:])
	}
	return policyExplain(ctx, e, args[1:])
}

func policyCheck(ctx context.Context, e *env, args []string) (int, error) {
	fset := newFlagSet(e, "policy check", "[flags] [FILE]", "Validates a policy file (default: "+defaultPolicyPath()+") and prints the\n"+
		"effective policy, every default filled in. It also checks what serve and run would\n"+
		"refuse at start-up: an audit file that cannot be written, and a runner image that an\n"+
		"engine it can reach does not have. Exits 1 when there is a problem. It warns about a\n"+
		"mount the sandbox's user cannot read. With no file, it says that the built-in\n"+
		"defaults apply and prints them.")
	offline := fset.Bool("offline", false, "do not ask a container engine whether the runner image is there")
	args, err := parseFlags(fset, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) > 1 {
		return exitUsage, usagef("takes at most one FILE, got %s", quoteArgs(args))
	}
	path := ""
	if len(args) == 1 {
		path = args[0]
	} else if path = defaultPolicyFile(e); path == "" {
		fmt.Fprintf(e.stderr, "no policy file at %s: the built-in defaults apply (docs/policy.md):\n", defaultPolicyPath())
	}
	p := policy.Default()
	if path != "" {
		if p, err = policy.Load(path); err != nil {
			fmt.Fprintln(e.stderr, err)
			return 1, nil
		}
	}
	fmt.Fprint(e.stdout, policy.Format(p))
	for _, w := range mountWarnings(p) {
		fmt.Fprintln(e.stderr, w)
	}
	problems := startProblems(ctx, e, p, *offline)
	for _, pr := range problems {
		fmt.Fprintf(e.stderr, "%s: %s\n", orDefaults(p.Source), pr)
	}
	if len(problems) > 0 {
		return 1, nil
	}
	return 0, nil
}

func orDefaults(source string) string {
	if source == "" {
		return "the built-in defaults"
	}
	return source
}

// startProblems lists what serve and run would refuse at start-up under
// p, beyond the file's own validity: the audit file, the limits, and the
// runner image where an engine can say (unless offline).
func startProblems(ctx context.Context, e *env, p *policy.Policy, offline bool) []string {
	var out []string
	if err := p.Audit.Check(); err != nil {
		out = append(out, err.Error())
	}
	if err := bridge.LimitsFrom(p).Validate(); err != nil {
		out = append(out, "sandbox: "+err.Error())
	}
	if offline {
		return out
	}
	image := runnerImage(p)
	key := "sandbox.image"
	if p.Sandbox.Image == "" {
		key = "sandbox.variant"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rt, err := detect.Open(ctx, p.Sandbox.Engine, zerolog.Nop())
	if err != nil {
		fmt.Fprintf(e.stderr, "note: the runner image %s was not checked: no engine reached (`bridge doctor` says why)\n", image)
		return out
	}
	defer rt.Close()
	if _, err := rt.ImageInfo(ctx, image); err != nil {
		if errors.Is(err, sandbox.ErrImageNotFound) {
			err = fmt.Errorf("%s has no image %s: %s", rt.Name(), image, missingImageHint(hasImage)(image, rt.Name()))
		}
		out = append(out, fmt.Sprintf("%s: %v", key, err))
	}
	return out
}

func policyExplain(ctx context.Context, e *env, args []string) (int, error) {
	fset := newFlagSet(e, "policy explain", "[flags] SERVER TOOL", "Says whether the policy lets the code call SERVER's TOOL, and which rule decides\n"+
		"and why. The tool's annotations are read from the server itself (started as\n"+
		"serve would: --servers-config, or the default files) unless --offline.")
	path := fset.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	offline := fset.Bool("offline", false, "do not start the server: judge the tool as if it declared no annotations")
	var uf upstreamFlags
	uf.register(fset, false)
	args, err := parseFlags(fset, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 2 {
		return exitUsage, usagef("want SERVER TOOL, got %s", quoteArgs(args))
	}
	server, tool := args[0], args[1]
	p, _, err := loadPolicy(e, *path, nil, nil)
	if err != nil {
		return exitUsage, err
	}
	t := policy.Tool{Server: server, Name: tool}
	note := "the tool's annotations were not read (--offline): MCP defaults assumed"
	if !*offline {
		read, err := readTool(ctx, e, &uf, p.Budgets.CallTimeout, server, tool)
		if err != nil {
			note = fmt.Sprintf("the tool's annotations could not be read (%v): MCP defaults assumed", err)
		} else {
			t, note = read, ""
		}
	}
	if note != "" {
		fmt.Fprintln(e.stdout, "note: "+note)
	}
	fmt.Fprint(e.stdout, p.Explain(t))
	if !strings.HasSuffix(p.Explain(t), "\n") {
		fmt.Fprintln(e.stdout)
	}
	switch d := p.Decide(t); {
	case d.Ask:
		return exitAsk, nil
	case !d.Allow:
		return 1, nil
	}
	return 0, nil
}

// readTool starts server (from the servers config) and returns what the
// gate would decide on for its tool: proxy.CatalogToolPolicy, the gate's
// own rule, so that explain judges the tool as the gate does.
func readTool(ctx context.Context, e *env, uf *upstreamFlags, callTimeout time.Duration, server, tool string) (policy.Tool, error) {
	var none policy.Tool
	cfg, err := uf.loadServers(e, "", e.log)
	if err != nil {
		return none, err
	}
	var sc []proxy.ServerConfig
	for _, s := range cfg.Servers {
		if s.Name == server {
			sc = append(sc, s)
		}
	}
	if len(sc) == 0 {
		return none, fmt.Errorf("no server %q in the servers config", server)
	}
	p := proxy.New(proxy.Config{Servers: sc}, proxyOptions(nil, callTimeout, nil, e.log))
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := p.Connect(ctx, e.log)
	if err != nil {
		return none, err
	}
	defer c.Close()
	cat, err := c.Catalog(ctx)
	if err != nil {
		return none, err
	}
	t, ok := cat.Lookup(server, tool)
	if !ok {
		if _, err := c.Resolve(ctx, server, tool); err != nil {
			return none, err
		}
		return none, fmt.Errorf("server %q has no tool %q", server, tool)
	}
	return proxy.CatalogToolPolicy(t)
}
