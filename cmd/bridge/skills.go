package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/bridge-mcp/bridge/internal/skills"
	"github.com/bridge-mcp/bridge/policy"
)

const skillsUsage = "Usage:\n" +
	"  bridge skills list [--policy FILE] [--json]   the saved skills: name, signature, servers, saved, description\n" +
	"  bridge skills show [--policy FILE] NAME       one skill: what it says of itself, then its source\n" +
	"  bridge skills rm [--policy FILE] NAME...      remove skills\n" +
	"The folder is the policy's skills.dir (docs/policy.md); docs/sandbox-api.md says how code saves and imports them.\n"

func cmdSkills(_ context.Context, e *env, args []string) (int, error) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(e.stdout, skillsUsage)
		return 0, nil
	}
	if len(args) == 0 {
		return exitUsage, usagef("want `bridge skills list`, `bridge skills show NAME` or `bridge skills rm NAME...`")
	}
	switch args[0] {
	case "list", "ls":
		return skillsList(e, args[1:])
	case "show":
		return skillsShow(e, args[1:])
	case "rm", "remove":
		return skillsRemove(e, args[1:])
	}
	return exitUsage, usagef("unknown subcommand %q: want list, show or rm", args[0])
}

// skillsStore opens the skills folder of the policy at path (the default
// place when "").
func skillsStore(e *env, path string) (*skills.Store, policy.Skills, error) {
	p, _, err := loadPolicy(e, path, nil, nil)
	if err != nil {
		return nil, policy.Skills{}, err
	}
	cfg := p.Skills
	dir, err := cfg.Folder()
	if err != nil {
		return nil, cfg, err
	}
	st, err := skills.Open(dir, skills.Limits{MaxCount: cfg.MaxCount, MaxBytes: int(cfg.MaxBytes)})
	return st, cfg, err
}

func skillsList(e *env, args []string) (int, error) {
	fs := newFlagSet(e, "skills list", "[flags]", "Lists the skills that runs saved, from the policy's skills folder.")
	path := fs.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	st, _, err := skillsStore(e, *path)
	if err != nil {
		return exitUsage, err
	}
	list, err := st.List()
	if err != nil {
		return 1, err
	}
	if *asJSON {
		if list == nil {
			list = []skills.Skill{}
		}
		out, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return 1, err
		}
		fmt.Fprintln(e.stdout, string(out))
		return 0, nil
	}
	if len(list) == 0 {
		fmt.Fprintf(e.stderr, "no skills in %s\n", st.Dir())
		return 0, nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIGNATURE\tSERVERS\tSAVED\tBY\tDESCRIPTION")
	for _, s := range list {
		servers := strings.Join(s.Servers, ",")
		if servers == "" {
			servers = "-"
		}
		sig := s.Signature
		if sig == "" {
			sig = "(module)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, oneLine(sig, 40), oneLine(servers, 30), s.Saved.Local().Format(time.DateTime),
			oneLine(s.SavedBy.String(), 40), oneLine(s.Description, 60))
	}
	tw.Flush()
	fmt.Fprintf(e.stderr, "%d skills in %s\n", len(list), st.Dir())
	return 0, nil
}

func skillsShow(e *env, args []string) (int, error) {
	fs := newFlagSet(e, "skills show", "[flags] NAME", "Prints one skill: its name, description, signature, the servers it calls and\nwhen it was saved, then its source.")
	path := fs.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 1 {
		return exitUsage, usagef("want one NAME, got %s", quoteArgs(args))
	}
	st, _, err := skillsStore(e, *path)
	if err != nil {
		return exitUsage, err
	}
	s, err := st.Get(args[0])
	if err != nil {
		return 1, notFoundHint(err, st)
	}
	fmt.Fprintf(e.stdout, "# skill %s, saved %s by %s\n", s.Name, s.Saved.Local().Format(time.DateTime), oneLine(s.SavedBy.String(), 200))
	if src := visible(s.Source); src != s.Source {
		fmt.Fprintln(e.stdout, "# WARNING: the source holds control, bidi or invisible characters, shown below as escapes (\\x1b, \\u{202e}...): bridge itself refuses such a save, so this file was written by other means")
	}
	if s.Description != "" {
		fmt.Fprintf(e.stdout, "# %s\n", oneLine(s.Description, 200))
	}
	if s.Signature != "" {
		fmt.Fprintf(e.stdout, "# from skills import %s; %s%s\n", s.Name, s.Name, s.Signature)
	}
	if len(s.Servers) > 0 {
		fmt.Fprintf(e.stdout, "# calls: %s\n", oneLine(strings.Join(s.Servers, ", "), 400))
	}
	fmt.Fprintln(e.stdout)
	src := visible(s.Source)
	fmt.Fprint(e.stdout, src)
	if !strings.HasSuffix(src, "\n") {
		fmt.Fprintln(e.stdout)
	}
	return 0, nil
}

func skillsRemove(e *env, args []string) (int, error) {
	fs := newFlagSet(e, "skills rm", "[flags] NAME...", "Removes skills from the policy's skills folder. Runs already started keep\nthe ones they imported.")
	path := fs.String("policy", "", "the policy `FILE` (default: "+defaultPolicyPath()+" if it exists, else the built-in defaults)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) == 0 {
		return exitUsage, usagef("want one NAME or more")
	}
	st, cfg, err := skillsStore(e, *path)
	if err != nil {
		return exitUsage, err
	}
	if cfg.ReadOnly {
		return 1, fmt.Errorf("the policy makes the skills folder %s read-only (skills.read_only): change it where it comes from", st.Dir())
	}
	code := 0
	for _, name := range args {
		if err := st.Remove(name); err != nil {
			fmt.Fprintf(e.stderr, "bridge skills: %v\n", notFoundHint(err, st))
			code = 1
			continue
		}
		fmt.Fprintf(e.stdout, "removed %s\n", name)
	}
	return code, nil
}

// notFoundHint adds where the skills were looked for to a not-found error.
func notFoundHint(err error, st *skills.Store) error {
	if errors.Is(err, skills.ErrNotFound) {
		return fmt.Errorf("%w in %s: `bridge skills list` lists them", err, st.Dir())
	}
	return err
}

// visible is s with every control character but line feed and tab (and
// the carriage return of a CRLF) written as an escape: a skill's text must
// not drive the operator's terminal (move the cursor, erase a line) while
// it is reviewed.
func visible(s string) string {
	if strings.IndexFunc(s, func(r rune) bool {
		return (unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r') || skills.Hidden(r)
	}) < 0 && !strings.Contains(strings.ReplaceAll(s, "\r\n", ""), "\r") {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
			b.WriteRune(r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case skills.Hidden(r):
			fmt.Fprintf(&b, "\\u{%04x}", r) // bidi and invisible characters: Trojan Source
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// oneLine is s on one line, its control characters escaped, cut to n runes.
func oneLine(s string, n int) string {
	s = visible(strings.Join(strings.Fields(s), " "))
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// skillsLine says, for doctor, where the skills are, how many, and whether
// runs may save more.
func skillsLine(cfg policy.Skills) string {
	dir, err := cfg.Folder()
	if err != nil {
		return err.Error()
	}
	n := "none saved yet"
	st, err := skills.Open(dir, skills.Limits{MaxCount: cfg.MaxCount, MaxBytes: int(cfg.MaxBytes)})
	if err == nil {
		if list, lerr := st.List(); lerr != nil {
			n = lerr.Error()
		} else if len(list) > 0 {
			n = fmt.Sprintf("%d of at most %d", len(list), cfg.MaxCount)
		}
	}
	save := "runs may save more"
	switch {
	case cfg.ReadOnly:
		save = "read-only: runs import them, nothing is written"
	case !cfg.Save:
		save = "saving off (skills.save false): runs import them only"
	}
	return fmt.Sprintf("%s in %s; %s", n, dir, save)
}
