package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// policyReloadInterval is how often serve checks the policy file for
// changes.
const policyReloadInterval = time.Second

// defaultPolicyPath is where the policy is read from when --policy is not
// given: $XDG_CONFIG_HOME/bridge/policy.yaml, ~/.config/bridge/policy.yaml.
func defaultPolicyPath() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "bridge", "policy.yaml")
}

// sandboxFlags are the flags a policy file sets instead: with --policy (or
// a policy at the default location) they are refused, so that one place
// says what the sandbox gets.
var sandboxFlags = []string{"runtime", "oci-runtime", "image", "timeout", "max-timeout", "memory", "cpus", "pids", "tmpfs-size",
	"output-limit", "max-concurrent", "queue", "allow-unenforced-limits", "call-timeout"}

// loadPolicy returns the policy to run with and its file ("" for none):
// the file of --policy, else the default location if a file is there,
// else the built-in defaults with the sandbox flags applied (apply).
func loadPolicy(fset *flag.FlagSet, path string, apply func(*policy.Policy)) (*policy.Policy, string, error) {
	explicit := path != ""
	if !explicit {
		path = defaultPolicyPath()
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) || path == "" {
			p := policy.Default()
			apply(p)
			return p, "", nil
		}
	}
	var set []string
	fset.Visit(func(f *flag.Flag) {
		for _, n := range sandboxFlags {
			if f.Name == n {
				set = append(set, "--"+n)
			}
		}
	})
	if len(set) > 0 {
		where := "--policy " + path
		if !explicit {
			where = "the policy at " + path
		}
		return nil, "", usagef("%s is given with %s: set those in the policy file (docs/policy.md)", strings.Join(set, ", "), where)
	}
	p, err := policy.Load(path)
	if err != nil {
		return nil, "", err
	}
	return p, path, nil
}

// runPolicy is loadPolicy for the commands that run code (serve, run):
// it also checks the sandbox limits and that a remote proxy could apply the
// policy, and names the runner image (images.Name() when the policy leaves
// it empty).
func runPolicy(fset *flag.FlagSet, path, proxyURL string, apply func(*policy.Policy)) (p *policy.Policy, file string, limits sandbox.Limits, image string, err error) {
	p, file, err = loadPolicy(fset, path, apply)
	if err != nil {
		return nil, "", limits, "", err
	}
	limits = bridge.LimitsFrom(p.Sandbox)
	if err := limits.Validate(); err != nil {
		return nil, "", limits, "", usagef("%v", err)
	}
	if err := remoteProxyPolicy(proxyURL, p); err != nil {
		return nil, "", limits, "", err
	}
	image = p.Sandbox.Image
	if image == "" {
		image = images.Name()
	}
	return p, file, limits, image, nil
}

// openStore puts p in force, reloads it when its file changes or on
// SIGHUP, until ctx ends.
func openStore(ctx context.Context, p *policy.Policy, path string, log zerolog.Logger) (*policy.Store, error) {
	store, err := policy.NewStore(p, path, log)
	if err != nil {
		return nil, err
	}
	// SIGHUP reloads (and reopens the audit file); with no policy file it
	// only says so: it must never end the bridge.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	if path == "" {
		log.Info().Msg("policy: the built-in defaults (no policy file; see docs/policy.md)")
	} else {
		log.Info().Str("policy", path).Msg("policy: in force")
		go store.Watch(ctx, policyReloadInterval)
	}
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if path == "" {
					log.Info().Msg("policy: SIGHUP, but there is no policy file to reload")
					continue
				}
				log.Info().Str("policy", path).Msg("policy: SIGHUP, reloading")
				_, _ = store.ReloadNow()
			}
		}
	}()
	return store, nil
}

func cmdPolicy(ctx context.Context, e *env, args []string) (int, error) {
	if len(args) == 0 || (args[0] != "check" && args[0] != "explain") {
		return exitUsage, usagef("want `bridge policy check [FILE]` or `bridge policy explain [--policy FILE] SERVER TOOL`")
	}
	if args[0] == "check" {
		return policyCheck(e, args[1:])
	}
	return policyExplain(ctx, e, args[1:])
}

func policyCheck(e *env, args []string) (int, error) {
	fset := newFlagSet(e, "policy check", "[FILE]", "Validates a policy file (default: "+defaultPolicyPath()+") and prints the\n"+
		"effective policy, every default filled in. Exits 1 when the file is invalid.")
	if err := parseFlags(fset, args); err != nil {
		return exitUsage, err
	}
	if fset.NArg() > 1 {
		return exitUsage, usagef("takes at most one FILE")
	}
	path := fset.Arg(0)
	if path == "" {
		path = defaultPolicyPath()
	}
	p, err := policy.Load(path)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return 1, nil
	}
	fmt.Fprint(e.stdout, policy.Format(p))
	return 0, nil
}

func policyExplain(ctx context.Context, e *env, args []string) (int, error) {
	fset := newFlagSet(e, "policy explain", "[flags] SERVER TOOL", "Says whether the policy lets the code call SERVER's TOOL, and which rule decides\n"+
		"and why. The tool's annotations are read from the server itself (started as\n"+
		"serve would: --servers-config, or the default files) unless --offline.")
	path := fset.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	offline := fset.Bool("offline", false, "do not start the server: judge the tool as if it declared no annotations")
	var uf upstreamFlags
	uf.register(fset, false)
	if err := parseFlags(fset, args); err != nil {
		return exitUsage, err
	}
	if fset.NArg() != 2 {
		return exitUsage, usagef("want SERVER TOOL")
	}
	server, tool := fset.Arg(0), fset.Arg(1)
	p, _, err := loadPolicy(fset, *path, func(*policy.Policy) {})
	if err != nil {
		return exitUsage, err
	}
	t := policy.Tool{Server: server, Name: tool}
	note := "the tool's annotations were not read (--offline): MCP defaults assumed"
	if !*offline {
		ann, err := readAnnotations(ctx, e, &uf, server, tool)
		if err != nil {
			note = fmt.Sprintf("the tool's annotations could not be read (%v): MCP defaults assumed", err)
		} else {
			t.Annotations, note = ann, ""
		}
	}
	if note != "" {
		fmt.Fprintln(e.stdout, "note: "+note)
	}
	fmt.Fprint(e.stdout, p.Explain(t))
	if !strings.HasSuffix(p.Explain(t), "\n") {
		fmt.Fprintln(e.stdout)
	}
	if !p.Decide(t).Allow {
		return 1, nil
	}
	return 0, nil
}

// readAnnotations starts server (from the servers config) and returns
// tool's annotations.
func readAnnotations(ctx context.Context, e *env, uf *upstreamFlags, server, tool string) (policy.ToolAnnotations, error) {
	var none policy.ToolAnnotations
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
	p := proxy.New(proxy.Config{Servers: sc}, uf.proxyOptions(nil, e.log))
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
	var a struct {
		ReadOnlyHint    *bool `json:"readOnlyHint"`
		DestructiveHint *bool `json:"destructiveHint"`
		IdempotentHint  *bool `json:"idempotentHint"`
		OpenWorldHint   *bool `json:"openWorldHint"`
	}
	if len(t.Annotations) > 0 {
		if err := json.Unmarshal(t.Annotations, &a); err != nil {
			return none, err
		}
	}
	return policy.ToolAnnotations{ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
		IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}, nil
}

// remoteProxyPolicy refuses a policy whose tool rules or budgets would not
// apply: with --proxy-url the remote proxy decides tool calls under its own
// policy, and a rule given here must never be silently ignored.
func remoteProxyPolicy(proxyURL string, p *policy.Policy) error {
	if proxyURL == "" {
		return nil
	}
	d := policy.Default()
	if p.Source == "" {
		d.Budgets.CallTimeout = p.Budgets.CallTimeout // from --call-timeout, which the proxy's own flag sets
	}
	if !reflect.DeepEqual(p.Tools, d.Tools) || !reflect.DeepEqual(p.Budgets, d.Budgets) {
		return usagef("the policy %s sets tools or budgets, but with --proxy-url the remote proxy decides tool calls under its own policy: give those sections to `bridge proxy --policy` instead", p.Source)
	}
	return nil
}
