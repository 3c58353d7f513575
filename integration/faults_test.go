package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/sandbox"
)

// Faults the bridge must survive: the engine going away and coming back,
// containers killed or removed behind its back, an upstream flooding its
// stderr, and an MCP client that never reads the bridge's stderr.

// engineScript runs integration/env/engine.sh ACTION ENGINE.
func engineScript(t *testing.T, action, engine string) {
	t.Helper()
	if out, err := runEngineScript(action, engine); err != nil {
		t.Fatalf("engine.sh %s %s: %v\n%s", action, engine, err, out)
	} else {
		t.Logf("engine.sh %s %s: %s", action, engine, out)
	}
}

func runEngineScript(action, engine string) (string, error) {
	script := filepath.Join(repoRoot(), "integration", "env", "engine.sh")
	out, err := exec.Command("bash", script, action, engine).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// engineNotOurs is engine.sh's exit status for an engine that setup.sh did
// not start: one that ran before `make test` (a system service, a
// developer's own), which a test must not stop.
const engineNotOurs = 3

// needOwnEngine skips the test unless e's engine is one that setup.sh
// started, and so one a test may stop and start again. An engine that ran
// before (a system service, a developer's own) is skipped, in CI too:
// stopping it would take it from whoever else uses it, and starting "it"
// again would start a second daemon beside the first. Tests call it
// before they start anything.
func needOwnEngine(t *testing.T, e *engine) {
	t.Helper()
	out, err := runEngineScript("owned", e.name)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == engineNotOurs {
		t.Skipf("%s ran before setup.sh: this test restarts only an engine the test set-up started (%s)", e.name, out)
	}
	if err != nil {
		t.Fatalf("engine.sh owned %s: %v\n%s", e.name, err, out)
	}
}

// stopEngine stops e's engine (needOwnEngine said the test may) for a test
// that then starts it again with the returned function; a cleanup starts it
// if the test ends first.
func stopEngine(t *testing.T, e *engine) (start func()) {
	t.Helper()
	engineScript(t, "stop", e.name)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			engineScript(t, "start", e.name)
		}
	})
	return func() {
		t.Helper()
		engineScript(t, "start", e.name)
		stopped = false
	}
}

// coldBridge starts `bridge serve` on e with the warm pool off, so that
// the one container that appears during a call is the call's: these tests
// act on it from outside. The pool's own faults are in pool_test.go. The
// bridge's progress messages arrive on the returned channel (the newest
// are dropped while nobody reads).
func coldBridge(t *testing.T, e *engine) (*mcp.ClientSession, int, *syncBuffer, <-chan string) {
	t.Helper()
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	writePoolPolicy(t, e, policyFile, 0, "")
	progress := make(chan string, 64)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		select {
		case progress <- r.Params.Message:
		default:
		}
	}}
	cs, pid, stderr := connectStdioArgs(t, e, opts, "--policy", policyFile)
	return cs, pid, stderr, progress
}

// startLongRun calls run_python with code that prints "up" and sleeps, and
// returns once the code runs (the bridge's progress says "up"), with the
// run's container and a channel for its result. It looks only at the
// containers of the bridge process pid: other bridges may run on the same
// engine.
func startLongRun(t *testing.T, e *engine, pid int, cs *mcp.ClientSession, progress <-chan string) (<-chan *mcp.CallToolResult, sandbox.ContainerInfo) {
	t.Helper()
	before := map[string]bool{}
	for _, c := range containersOf(t, e, pid) {
		before[c.ID] = true
	}
	for len(progress) > 0 {
		<-progress
	}
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "run_python",
			Arguments: map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(300)", "timeout_seconds": 280}}
		p.SetProgressToken("long-run")
		res, err := cs.CallTool(context.Background(), p)
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "tools/call: " + err.Error()}}}
		}
		done <- res
	}()
	timeout := time.After(60 * time.Second)
	for up := false; !up; {
		select {
		case msg := <-progress:
			up = strings.Contains(msg, "up")
		case res := <-done:
			t.Fatalf("the long run ended before it printed: %s", contentText(res))
		case <-timeout:
			t.Fatal("the long run did not print \"up\" within 60 s")
		}
	}
	var mine []sandbox.ContainerInfo
	for _, c := range containersOf(t, e, pid) {
		if !before[c.ID] {
			mine = append(mine, c)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("the bridge has %d new containers while its one run runs, want 1: %v", len(mine), mine)
	}
	return done, mine[0]
}

// awaitResult waits a bounded time for a call's result.
func awaitResult(t *testing.T, done <-chan *mcp.CallToolResult, within time.Duration) (*mcp.CallToolResult, callOutput) {
	t.Helper()
	select {
	case res := <-done:
		var out callOutput
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
		return res, out
	case <-time.After(within):
		t.Fatalf("no result within %s: the bridge hangs", within)
		return nil, callOutput{}
	}
}

// waitNoContainers waits until no container of the bridge process pid is
// left (of it alone: other bridges may run on the same engine).
func waitNoContainers(t *testing.T, e *engine, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		cs := containersOf(t, e, pid)
		if len(cs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers of the bridge left after %s: %v", within, cs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// The engine stops under a run and starts again: the run fails with a clear
// error, the next run works without restarting the bridge, and the run's
// container is removed once the engine is back.
func TestFaultEngineRestart(t *testing.T) {
	if rootless() {
		t.Skip("restarting an engine needs root: the rootful run tests it on docker and podman")
	}
	forEngines(t, except("engine.sh stops and starts the Docker and Podman daemons that setup.sh started; "+
		"the test cluster's API server and kubelet are not an engine a test may stop under the bridge", kindKubernetes), func(t *testing.T, e *engine) {
		needOwnEngine(t, e)
		cs, pid, stderr, progress := coldBridge(t, e)
		if out := mustRun(t, cs, "print(6*7)"); out != "42\n" {
			t.Fatalf("before: %q", out)
		}
		done, c := startLongRun(t, e, pid, cs, progress)
		startAgain := stopEngine(t, e)
		res, out := awaitResult(t, done, 90*time.Second)
		msg := contentText(res)
		if !res.IsError || out.Status == "ok" || msg == "" {
			t.Fatalf("a run whose engine went away: isError %v, status %q, %q", res.IsError, out.Status, msg)
		}
		t.Logf("the run, engine stopped: status %q: %s", out.Status, firstLineOf(msg))
		startAgain()
		// The test's own engine client reconnects on its next request.
		if got := mustRun(t, cs, "print(6*7)"); got != "42\n" {
			t.Fatalf("after the engine came back: %q\nbridge stderr:\n%s", got, stderr.String())
		}
		waitNoContainers(t, e, pid, 90*time.Second)
		t.Logf("container %s of the interrupted run is gone", c.ID[:12])
	})
}

// A container killed, or removed, from outside: the run ends at once with a
// clear message, and the next run works.
func TestFaultContainerGoneFromOutside(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		cs, pid, _, progress := coldBridge(t, e)
		for _, how := range []string{"kill", "remove"} {
			t.Run(how, func(t *testing.T) {
				done, c := startLongRun(t, e, pid, cs, progress)
				start := time.Now()
				var err error
				if how == "kill" {
					err = e.rt.Kill(context.Background(), c.ID)
				} else {
					err = e.rt.Remove(context.Background(), c.ID)
				}
				if err != nil {
					t.Fatal(err)
				}
				res, out := awaitResult(t, done, 60*time.Second)
				if !res.IsError || out.Status == "ok" || !strings.Contains(out.Stdout, "up") && out.Status != "unavailable" {
					t.Fatalf("status %q, stdout %q: %s", out.Status, out.Stdout, contentText(res))
				}
				t.Logf("%s from outside: status %q after %s: %s", how, out.Status, time.Since(start).Round(time.Millisecond), firstLineOf(contentText(res)))
				if got := mustRun(t, cs, "print(6*7)"); got != "42\n" {
					t.Fatalf("the next run: %q", got)
				}
				waitNoContainers(t, e, pid, 30*time.Second)
			})
		}
	})
}

// An upstream that floods its stderr, and a client that never reads the
// bridge's: the bridge keeps serving, and the audit file keeps every record.
func TestFaultStderrFloods(t *testing.T) {
	scope := aboveEngine("an upstream that floods its stderr, and a client that never reads the bridge's")
	runsOn(t, scope)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	forEngines(t, scope, func(t *testing.T, e *engine) {
		dir := t.TempDir()
		cfg := filepath.Join(dir, "servers.json")
		// The upstream writes ~50 MB/s to its stderr while it serves.
		writeServers(t, cfg, map[string]any{
			"misbehave": map[string]any{"command": "sh",
				"args": []string{"-c", `(while :; do echo "stderr flood line, stderr flood line, stderr flood line"; done) >&2 & exec "$0"`, self},
				"env":  map[string]string{upstreamEnv: "1"}},
		})
		audit := filepath.Join(dir, "audit.jsonl")
		pol := filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(pol, []byte("version: 1\n"+sandboxSection(e)+"audit:\n  file: "+audit+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args, env := serveArgs(e)
		args = append(withoutSandboxFlags(args), "--servers-config", cfg, "--policy", pol)
		cmd := exec.Command(testSuite.bridgeBin, args...)
		cmd.Env = append(os.Environ(), append(env, "BRIDGE_LOG_LEVEL=debug")...)
		// A pipe for stderr that nobody reads: once its 64 KiB buffer is
		// full, every write to it blocks.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		cmd.Stderr = w
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "faults", Version: "1"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		const runs = 12
		for i := range runs {
			code := fmt.Sprintf(`import mcp_tools
for j in range(5):
    r = mcp_tools.call("misbehave", "echo", message="m%d")
print(r["message"])`, i)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			res, out := callRunPython(t, ctx, cs, code, nil)
			cancel()
			if res.IsError || !strings.Contains(out.Stdout, fmt.Sprintf("m%d", i)) {
				t.Fatalf("run %d with stderr unread: %s %q", i, out.Status, contentText(res))
			}
		}
		cs.Close()
		decisions, runRecords := auditCounts(t, audit)
		if runRecords != 2*runs || decisions["allow"] != runs*5 {
			t.Fatalf("audit with stderr unread: %d run records (want %d), decisions %v (want %d allowed)", runRecords, 2*runs, decisions, runs*5)
		}
		t.Logf("%d runs, %d tool calls with an upstream flooding stderr and stderr never read; audit: %d run records, decisions %v", runs, runs*5, runRecords, decisions)
	})
}

// mustRun runs code through cs and returns its stdout, failing unless ok.
func mustRun(t *testing.T, cs *mcp.ClientSession, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, out := callRunPython(t, ctx, cs, code, nil)
	if res.IsError || out.Status != "ok" {
		t.Fatalf("run %q: status %q: %s", code, out.Status, contentText(res))
	}
	return out.Stdout
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
