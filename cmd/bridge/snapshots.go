package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"text/tabwriter"
	"time"

	"github.com/bridge-mcp/bridge/bridge/snapshots"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
)

const snapshotsUsage = "Usage:\n" +
	"  bridge snapshots list [--policy FILE] [--owner NAME] [--json]   the snapshots kept: owner, label, kind, size, memory, created, expires\n" +
	"  bridge snapshots rm [--policy FILE] OWNER LABEL                 remove one\n" +
	"  bridge snapshots prune [--policy FILE]                          remove the expired ones, and what saves that died left\n" +
	"The folder is the policy's snapshots.dir (docs/policy.md); docs/operations.md says more.\n"

func cmdSnapshots(_ context.Context, e *env, args []string) (int, error) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(e.stdout, snapshotsUsage)
		return 0, nil
	}
	if len(args) == 0 {
		return exitUsage, usagef("want `bridge snapshots list`, `bridge snapshots rm OWNER LABEL` or `bridge snapshots prune`")
	}
	switch args[0] {
	case "list", "ls":
		return snapshotsList(e, args[1:])
	case "rm", "remove":
		return snapshotsRemove(e, args[1:])
	case "prune":
		return snapshotsPrune(e, args[1:])
	}
	return exitUsage, usagef("unknown subcommand %q: want list, rm or prune", args[0])
}

// snapshotsStore opens the snapshots folder of the policy at path (the
// default place when ""), writing its events to the policy's audit with
// why (the operator's command). The store is nil, without error, when the
// folder does not exist: nothing was ever saved there, and nothing is
// created.
func snapshotsStore(e *env, path, why string) (*snapshots.Store, string, func(), error) {
	p, _, err := loadPolicy(e, path, nil, nil)
	if err != nil {
		return nil, "", nil, err
	}
	cfg := p.Snapshots
	dir, err := cfg.Folder()
	if err != nil {
		return nil, "", nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, dir, func() {}, nil
	}
	audit, err := policy.OpenAuditor(p.Audit, e.log)
	if err != nil {
		return nil, dir, nil, err
	}
	st, err := snapshots.Open(snapshots.Options{Dir: dir, MaxBytes: cfg.MaxBytes, MaxCount: cfg.MaxCount, TTL: cfg.TTL, SweepEvery: -1, Logger: e.log,
		OnEvent: func(ev snapshots.Event) {
			r := snapshots.Record(ev)
			r.Reason = why
			audit.Snapshot(r)
		}})
	if err != nil {
		audit.Close()
		return nil, dir, nil, err
	}
	return st, st.Dir(), func() { st.Close(); audit.Close() }, nil
}

func snapshotsList(e *env, args []string) (int, error) {
	fs := newFlagSet(e, "snapshots list", "[flags]", "Lists the snapshots that sessions saved, from the policy's snapshots folder:\nevery client's, or one's (--owner). Expired ones are not listed (prune removes them).")
	path := fs.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	owner := fs.String("owner", "", "only the snapshots of the client `NAME` (local for stdio)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	st, dir, done, err := snapshotsStore(e, *path, "")
	if err != nil {
		return exitUsage, err
	}
	defer done()
	var list []snapshots.Entry
	switch {
	case st == nil:
	case *owner != "":
		list, err = st.List(*owner)
	default:
		list, err = st.ListAll()
	}
	if err != nil {
		return 1, err
	}
	if *asJSON {
		if list == nil {
			list = []snapshots.Entry{}
		}
		out, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return 1, err
		}
		fmt.Fprintln(e.stdout, string(out))
		return 0, nil
	}
	if len(list) == 0 {
		fmt.Fprintf(e.stderr, "no snapshots in %s\n", dir)
		return 0, nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tLABEL\tKIND\tSIZE\tMEMORY\tCREATED\tEXPIRES")
	for _, s := range list {
		memory := "-" // a snapshot of files holds no memory
		if s.Kind == snapshots.KindMemory {
			memory = units.Bytes(s.MemoryBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(s.Owner, 40), s.Label, s.Kind, units.Bytes(s.Size), memory,
			s.Created.Local().Format(time.DateTime), s.Expires.Local().Format(time.DateTime))
	}
	tw.Flush()
	fmt.Fprintf(e.stderr, "%d snapshots in %s\n", len(list), dir)
	return 0, nil
}

func snapshotsRemove(e *env, args []string) (int, error) {
	fs := newFlagSet(e, "snapshots rm", "[flags] OWNER LABEL", "Removes the snapshot LABEL of the client OWNER (as `bridge snapshots list`\nnames them). A session restored from it keeps its files.")
	path := fs.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 2 {
		return exitUsage, usagef("want OWNER and LABEL, got %s", quoteArgs(args))
	}
	owner, label := args[0], args[1]
	st, dir, done, err := snapshotsStore(e, *path, "by the operator (bridge snapshots rm)")
	if err != nil {
		return exitUsage, err
	}
	defer done()
	if st != nil {
		err = st.Remove(owner, label)
	} else {
		err = snapshots.ErrNotFound
	}
	switch {
	case errors.Is(err, snapshots.ErrNotFound):
		return 1, fmt.Errorf("no snapshot %q of %q in %s: `bridge snapshots list` lists them", label, oneLine(owner, 80), dir)
	case err != nil:
		return 1, err
	}
	fmt.Fprintf(e.stdout, "removed %s of %s\n", label, oneLine(owner, 80))
	return 0, nil
}

func snapshotsPrune(e *env, args []string) (int, error) {
	fs := newFlagSet(e, "snapshots prune", "[flags]", "Removes the expired snapshots (older than snapshots.ttl) and what saves that\ndied left. A bridge does it too, every 10 minutes.")
	path := fs.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	st, dir, done, err := snapshotsStore(e, *path, "by the operator (bridge snapshots prune)")
	if err != nil {
		return exitUsage, err
	}
	defer done()
	var removed []snapshots.Entry
	if st != nil {
		if removed, err = st.Prune(); err != nil {
			return 1, err
		}
	}
	for _, s := range removed {
		fmt.Fprintf(e.stdout, "removed %s of %s (expired %s)\n", s.Label, oneLine(s.Owner, 80), s.Expires.Local().Format(time.DateTime))
	}
	fmt.Fprintf(e.stderr, "%d expired snapshots removed from %s\n", len(removed), dir)
	return 0, nil
}
