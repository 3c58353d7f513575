// Command bridge gives an AI agent one tool, run_python, and runs the
// agent's code in fresh, rootless, read-only, network-less containers.
//
// Usage:
//
//	bridge serve [flags]          serve MCP with one tool, run_python (stdio or --http)
//	bridge proxy --http ADDR      serve the upstream MCP proxy alone, for bridges to share
//	bridge policy check [FILE]    validate a policy and print it with defaults filled in
//	bridge policy explain S T     which rule decides whether the code may call server S's tool T
//	bridge run [flags] FILE|-     run a Python file in the sandbox
//	bridge skills list|show|rm    the skills that runs saved for later runs
//	bridge snapshots list|rm|prune  the snapshots that sessions saved
//	bridge doctor [flags]         check the container engines and prove the sandbox holds
//	bridge image build [flags]    build a runner image (--variant slim or datascience; --apt, --wheels)
//	bridge image name [flags]     print the runner image build makes
//	bridge version                print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/logwriter"
	"github.com/bridge-mcp/bridge/internal/suggest"
)

// version is set at build time: make build passes -ldflags
// "-X main.version=$(git describe --tags --always --dirty)". Read it
// through versionString.
var version string

// versionString is the bridge's version: the one stamped at build time;
// else the module version `go install ...@vX` records; else the commit a
// plain `go build` in a checkout records (with "-dirty" for local
// changes); else "dev".
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return rev[:min(12, len(rev))] + dirty
}

// Exit codes of the bridge itself; a run's own exit code passes through.
const (
	exitUsage    = 2   // bad flags or arguments
	exitAsk      = 3   // policy explain: the policy asks the human
	exitBridge   = 125 // the bridge could not run the code at all
	exitTimeout  = 124 // the code ran past its timeout
	exitCanceled = 130 // interrupted
)

// softMemoryLimit is the Go heap size past which the garbage collector
// works harder (runtime/debug.SetMemoryLimit), unless GOMEMLIMIT says
// otherwise. The bridge's own heap is a few MiB; what a run can make it
// hold is bounded (docs/security.md), and this keeps the garbage of big
// results from doubling that before it is collected. It is a soft limit:
// past it the bridge spends more CPU on collection, never fails.
const softMemoryLimit = 64 << 20

// gcPercent is the garbage collector's GOGC, unless the environment sets
// one. Most of what a tool call allocates is garbage at once: the MCP SDK
// decodes each message from an upstream with a JSON decoder that takes a
// 32 KiB buffer (about 140 KB a call, measured), while the bridge's live
// heap is a few MiB, so at the default 100 a loop of tool calls spent a
// fifth of the bridge's CPU collecting (docs/performance.md). At 400 it
// collects a quarter as often; the heap under load peaks about 13 MiB
// higher, and softMemoryLimit still bounds it.
const gcPercent = 400

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(softMemoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// usageError is a mistake on the command line; it exits with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// command is one subcommand: it parses its own flags and returns an exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) (int, error)
}

// env is what every command gets: streams and a logger.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	log            zerolog.Logger
	// again is closed by a second SIGINT or SIGTERM once wantAgain is set
	// (secondSignal).
	again     chan struct{}
	wantAgain *atomic.Bool
}

// secondSignal has a second SIGINT or SIGTERM, after the one that ended
// the command's ctx, close the returned channel instead of ending the
// process at once (a third one still does): serve and proxy drain on the
// first and stop draining on the second. Without signals (tests) the
// channel never closes.
func (e *env) secondSignal() <-chan struct{} {
	if e.wantAgain == nil {
		return nil
	}
	e.wantAgain.Store(true)
	return e.again
}

func commands() []command {
	return []command{
		{"serve", "serve MCP with the run_python tool (stdio, or --http ADDR)", cmdServe},
		{"proxy", "serve the upstream MCP proxy alone, for bridges to share (--http ADDR)", cmdProxy},
		{"run", "run a Python file (or - for stdin) in the sandbox", cmdRun},
		{"doctor", "check the container engines and prove the sandbox holds", cmdDoctor},
		{"policy", "check a policy file (policy check) or explain a decision (policy explain SERVER TOOL)", cmdPolicy},
		{"skills", "list, show or remove the skills that runs saved (skills list, skills show NAME, skills rm NAME)", cmdSkills},
		{"snapshots", "list or remove the snapshots that sessions saved (snapshots list, snapshots rm OWNER LABEL, snapshots prune)", cmdSnapshots},
		{"tools", "pin the upstream tools' definitions against rug pulls (tools lock, tools diff)", cmdTools},
		{"image", "build a runner image: slim, datascience, or with your packages (image build); print its name (image name)", cmdImage},
		{"version", "print the version", func(_ context.Context, e *env, _ []string) (int, error) {
			fmt.Fprintln(e.stdout, "bridge", versionString())
			return 0, nil
		}},
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// The first signal cancels the command, which then cleans up; a second
	// one gets the default action and ends the process at once, unless
	// the command asked for it (env.secondSignal): then the third does.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	again, wantAgain := make(chan struct{}), &atomic.Bool{}
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		cancel()
		if wantAgain.Load() {
			select {
			case <-sigs:
				close(again)
			case <-done:
				return
			}
		}
		signal.Stop(sigs)
	}()

	// Log records go through a bounded queue: a client that pipes stderr
	// and never reads it must not stall the bridge (records past the bound
	// are dropped and counted). What a command prints itself on stderr is
	// written directly.
	logs := logwriter.New(stderr, maxQueuedLogBytes)
	defer logs.Close(time.Second)
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, log: newLogger(stderr, logs, os.Getenv("BRIDGE_LOG_LEVEL")),
		again: again, wantAgain: wantAgain}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, "bridge", versionString())
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		code, err := c.run(ctx, e, args[1:])
		if err != nil {
			var ue usageError
			switch {
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.As(err, &ue):
				fmt.Fprintf(stderr, "bridge %s: %s\nRun `bridge %s -h` for its flags.\n", c.name, ue.msg, c.name)
				return exitUsage
			case ctx.Err() != nil:
				fmt.Fprintf(stderr, "bridge %s: interrupted: %v\n", c.name, err)
				return exitCanceled
			}
			fmt.Fprintf(stderr, "bridge %s: %v\n", c.name, err)
			if code == 0 {
				code = exitBridge
			}
		}
		return code
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	msg := fmt.Sprintf("bridge: unknown command %q", args[0])
	if strings.HasPrefix(args[0], "-") {
		msg = fmt.Sprintf("bridge: %s is not a command; flags come after the command (bridge COMMAND --flag)", args[0])
	} else if s := suggest.Key(args[0], names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	fmt.Fprintln(stderr, msg)
	printUsage(stderr)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "bridge: run an agent's Python in a hardened, network-less container.")
	fmt.Fprintln(w, "\nUsage: bridge COMMAND [flags]")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `bridge COMMAND -h` for a command's flags; `bridge --version` prints the version.")
	fmt.Fprintln(w, "Logs go to stderr; set BRIDGE_LOG_LEVEL=debug|info|warn|error (default: info for serve and")
	fmt.Fprintln(w, "proxy, warn for the other commands). Docs: README.md and docs/ in the repository.")
}

// maxQueuedLogBytes bounds the log records waiting for stderr.
const maxQueuedLogBytes = 1 << 20

// newLogger logs to w through q: readable on a terminal, JSON lines otherwise.
func newLogger(w io.Writer, q io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		lvl = zerolog.WarnLevel
	}
	out := q
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		out = zerolog.ConsoleWriter{Out: q, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger()
}

// newFlagSet returns a FlagSet that reports errors to the caller instead
// of exiting, with a usage text naming the command.
func newFlagSet(e *env, name, args, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bridge %s %s\n\n%s\n\nFlags:\n", name, args, about)
		printFlags(fs)
	}
	return fs
}

// printFlags is flag.PrintDefaults with the flags written as the docs
// write them (--name), and no default for a boolean that is off.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "false" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(fs.Output(), line)
	})
}

// parseFlags parses args, turning flag errors into usage errors, and
// returns the positional arguments. Flags may come after them too
// (`bridge run script.py --timeout 5s`); "--" ends the flags.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	// Parse would print errors and usage itself: say them once, here.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			fs.Usage()
			return nil, err
		}
		if err != nil {
			return nil, usageError{flagError(fs, err)}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// flagError rewrites the flag package's errors in the form the docs use
// (--name), with a did-you-mean for an unknown flag.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var known []string
		fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
		msg = "unknown flag --" + name
		if s := suggest.Key(name, known); s != "" {
			msg += "; did you mean --" + s + "?"
		}
		return msg
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "--" + strings.TrimLeft(name, "-") + " needs a value"
	}
	return strings.Replace(msg, " for flag -", " for --", 1)
}
