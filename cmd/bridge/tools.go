package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

const toolsUsage = `Usage: bridge tools lock|diff [flags]

Pins the upstream tools' definitions against a "rug pull" (a server that
changes a tool after it was reviewed):

  bridge tools lock [flags]   lists every upstream's tools and writes their
                              definitions to the lock file
  bridge tools diff [flags]   compares them with the lock file: prints what
                              changed, is new or is gone; exits 1 if anything

With tools.lock_file set in the policy, bridge serve and bridge proxy pin
the lock file's definitions, and tools.on_change decides the calls of a
tool that differs from it, or that it does not list (docs/policy.md).

Flags (both):
  --servers-config FILE   an MCP servers file (repeatable; default as serve)
  --policy FILE           the policy whose tools.lock_file names the file
  --lock FILE             the lock file (default: the policy's tools.lock_file)
`

func cmdTools(ctx context.Context, e *env, args []string) (int, error) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(e.stdout, toolsUsage)
		return 0, nil
	}
	if len(args) == 0 || (args[0] != "lock" && args[0] != "diff") {
		return exitUsage, usagef("want `bridge tools lock` or `bridge tools diff`")
	}
	sub := args[0]
	fs := newFlagSet(e, "tools "+sub, "[flags]", "See `bridge tools help`.")
	var uf upstreamFlags
	uf.register(fs, false)
	policyPath := fs.String("policy", "", "the policy `FILE` (default "+defaultPolicyPath()+" if it exists)")
	lockPath := fs.String("lock", "", "the lock `FILE` (default: the policy's tools.lock_file)")
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return exitUsage, err
	}
	if len(rest) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(rest))
	}
	pol, _, err := loadPolicy(e, *policyPath, nil, nil)
	if err != nil {
		return exitUsage, err
	}
	path := *lockPath
	if path == "" {
		path = pol.Tools.LockFile
	}
	if path == "" {
		return exitUsage, usagef("no lock file: give --lock FILE, or set tools.lock_file in the policy")
	}
	if err := uf.check(); err != nil {
		return exitUsage, err
	}
	cfg, err := uf.loadServers(e, "", e.log)
	if err != nil {
		return exitUsage, err
	}
	p := proxy.New(cfg, proxyOptions(nil, pol.Budgets.CallTimeout, nil, e.log))
	defer p.Close()
	now, failed := p.LockTools(ctx)
	for _, err := range failed {
		fmt.Fprintf(e.stderr, "bridge tools %s: %v\n", sub, err)
	}
	if sub == "lock" {
		if len(failed) > 0 {
			return 1, errors.New("not every server could be listed: no lock file was written")
		}
		return writeLock(e, path, now)
	}
	lock, err := readLock(path)
	if err != nil {
		return exitUsage, err
	}
	diff := proxy.LockDiff(lock, now)
	for _, line := range diff {
		fmt.Fprintln(e.stdout, line)
	}
	if len(diff) > 0 || len(failed) > 0 {
		return 1, nil
	}
	fmt.Fprintf(e.stderr, "the tools match %s\n", path)
	return 0, nil
}

// writeLock writes l to path, whole or not at all.
func writeLock(e *env, path string, l *proxy.Lock) (int, error) {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return exitBridge, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tools-lock-*")
	if err != nil {
		return exitBridge, fmt.Errorf("writing the lock file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(append(b, '\n')); err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return exitBridge, fmt.Errorf("writing the lock file: %w", err)
	}
	n := 0
	for _, tools := range l.Tools {
		n += len(tools)
	}
	fmt.Fprintf(e.stderr, "wrote %d tools of %d servers to %s\n", n, len(l.Tools), path)
	return 0, nil
}

// readLock reads the lock file at path.
func readLock(path string) (*proxy.Lock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the tools lock file: %w: write it with `bridge tools lock`", err)
	}
	l, err := proxy.ParseLock(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// toolsLock is the lock pol names, nil without one.
func toolsLock(pol *policy.Policy) (*proxy.Lock, error) {
	if pol.Tools.LockFile == "" {
		return nil, nil
	}
	return readLock(pol.Tools.LockFile)
}
