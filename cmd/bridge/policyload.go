package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Loading the policy, shared by the commands: where its file is, the
// command line's settings applied to it, what serve and run check of it,
// and the store that keeps it in force while serve and proxy run.

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

// defaultPolicyFile is the policy file at the default location, or "" when
// there is none. A location this user may not look into is none too, with
// a warning: that file would be this user's own configuration, which the
// user could remove anyway; an operator's policy is given with --policy.
func defaultPolicyFile(e *env) string {
	path := defaultPolicyPath()
	if path == "" {
		return ""
	}
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return path
	case errors.Is(err, fs.ErrNotExist):
	default:
		e.log.Warn().Err(err).Msg("policy: cannot look for the policy file at its default place; the built-in defaults apply (give one with --policy)")
	}
	return ""
}

// loadPolicy returns the policy to run with and its file ("" for none):
// the file of --policy, else the one at the default location if there is
// one, else the built-in defaults. The settings (flags) replace the
// defaults, or tighten a file's policy and are refused where they would
// loosen it. check, if not nil, judges the file's policy before the
// settings apply.
func loadPolicy(e *env, path string, settings []policy.Setting, check func(*policy.Policy) error) (*policy.Policy, string, error) {
	if path == "" {
		if path = defaultPolicyFile(e); path == "" {
			p, err := policy.Default().With(settings, policy.Replace)
			if err != nil {
				return nil, "", usagef("%v", err)
			}
			return p, "", nil
		}
	}
	file, err := policy.Load(path)
	if err != nil {
		return nil, "", err
	}
	if check != nil {
		if err := check(file); err != nil {
			return nil, "", err
		}
	}
	p, err := file.With(settings, policy.Tighten)
	if err != nil {
		return nil, "", usagef("%v", err)
	}
	return p, path, nil
}

// adjuster is what a reloaded policy goes through (policy.Store.Adjust):
// check, then the command line's settings, which yield where the new file
// is stricter.
func adjuster(settings []policy.Setting, check func(*policy.Policy) error) func(*policy.Policy) (*policy.Policy, error) {
	return func(p *policy.Policy) (*policy.Policy, error) {
		if check != nil {
			if err := check(p); err != nil {
				return nil, err
			}
		}
		return p.With(settings, policy.Cap)
	}
}

// runPolicy is loadPolicy for the commands that run code (serve, run):
// it also checks the sandbox limits and that a remote proxy could apply the
// policy, and names the runner image (runnerImage).
func runPolicy(e *env, path, proxyURL string, settings []policy.Setting) (p *policy.Policy, file string, limits sandbox.Limits, image string, err error) {
	p, file, err = loadPolicy(e, path, settings, func(p *policy.Policy) error { return remoteProxyPolicy(proxyURL, p) })
	if err != nil {
		return nil, "", limits, "", err
	}
	limits = bridge.LimitsFrom(p)
	if err := limits.Validate(); err != nil {
		return nil, "", limits, "", usagef("%v", err)
	}
	for _, w := range mountWarnings(p) {
		e.log.Warn().Msg("policy: " + w)
	}
	return p, file, limits, runnerImage(p), nil
}

// runnerImage is the image p runs code in: sandbox.image, or when that is
// empty the image this binary builds for sandbox.variant.
func runnerImage(p *policy.Policy) string {
	if p.Sandbox.Image != "" {
		return p.Sandbox.Image
	}
	return images.NameOf(p.Sandbox.Variant)
}

// openStore puts p in force, reloads it when its file changes or on
// SIGHUP, until ctx ends; each reloaded policy goes through adjust.
func openStore(ctx context.Context, p *policy.Policy, path string, adjust func(*policy.Policy) (*policy.Policy, error), log zerolog.Logger) (*policy.Store, error) {
	store, err := policy.NewStore(p, path, log)
	if err != nil {
		return nil, err
	}
	store.Adjust(adjust)
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

// remoteProxyPolicy refuses a policy whose tool rules or budgets would not
// apply: with --proxy-url the remote proxy decides tool calls under its own
// policy, and a rule given here must never be silently ignored.
func remoteProxyPolicy(proxyURL string, p *policy.Policy) error {
	if proxyURL == "" {
		return nil
	}
	d := policy.Default()
	if !reflect.DeepEqual(p.Tools, d.Tools) || !reflect.DeepEqual(p.Budgets, d.Budgets) {
		return usagef("the policy %s sets tools or budgets, but with --proxy-url the remote proxy decides tool calls under its own policy: give those sections to `bridge proxy --policy` instead", p.Source)
	}
	return nil
}
