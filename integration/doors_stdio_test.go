package integration

// The stdio door against a real client: what the TypeScript SDK does when
// it sends bridge serve a request over sandbox.max_request_bytes.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// oversizedCallTimeout is how long the client waits for each answer: a
// bound past which the test fails, not a measurement. The answers come at
// once; before the fix the one to the large call never came (the SDK writes
// the id after the params, and the bridge answered with "id": null).
const oversizedCallTimeout = 60 * time.Second

// oversizedEvent is one line of integration/npm/oversized-client.mjs.
type oversizedEvent struct {
	Event   string `json:"event"`
	PID     int    `json:"pid"`
	MS      int64  `json:"ms"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	Result  *struct {
		StructuredContent struct {
			Status string `json:"status"`
			Stdout string `json:"stdout"`
		} `json:"structuredContent"`
	} `json:"result"`
}

// oversizedClient starts integration/npm/oversized-client.mjs with bridge
// serve (args, env) as its server. The script imports the TypeScript SDK
// from the node_modules beside it, and the npm peers may be installed in
// another checkout ($BRIDGE_NPM_DIR): it runs from a copy in a folder of
// its own, beside a link to them.
func oversizedClient(t *testing.T, npm string, megabytes int, args, env []string) (events <-chan oversizedEvent, stdin io.WriteCloser, stderr *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join(repoRoot(), "integration", "npm", "oversized-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oversized-client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(npm, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(dir, "oversized-client.mjs"),
		strconv.Itoa(megabytes), strconv.FormatInt(oversizedCallTimeout.Milliseconds(), 10), "--", testSuite.bridgeBin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that the end of the test also ends the
	// bridge it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	stderr = &syncBuffer{}
	cmd.Stderr = stderr
	if stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan oversizedEvent, 4)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev oversizedEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = oversizedEvent{Event: "unreadable", Message: sc.Text()}
			}
			ch <- ev
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("oversized-client.mjs: %v\n%s", err, stderr)
		}
	})
	return ch, stdin, stderr
}

// TestDoorsStdioOversizedRequest (issue 33, finding 6): the TypeScript SDK,
// as a client of bridge serve over stdio with the pool on, sends a
// run_python call with 12 MB of code (over sandbox.max_request_bytes, 4 MiB)
// and, without waiting for it, a second call. The first is answered at once
// with -32600 naming the key, matched to its call: the SDK writes the id
// after the params, and before the fix the bridge answered with "id": null,
// which the SDK cannot match, and the call waited for its timeout. The
// second is answered and runs its code. The bridge's resident memory while
// it reads the 12 MB line stays bounded (it never holds the line).
func TestDoorsStdioOversizedRequest(t *testing.T) {
	scope := aboveEngine("bounding a request over stdio")
	runsOn(t, scope)
	npm := npmPeers(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		writePoolPolicy(t, e, policyFile, 2, "")
		debugAddr := freeLoopbackAddr(t)
		args, env := serveArgs(e)
		args = append(withoutSandboxFlags(args), "--policy", policyFile, "--debug-addr", debugAddr)
		events, stdin, stderr := oversizedClient(t, npm, 12, args, env)

		next := func(what string) oversizedEvent {
			t.Helper()
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("oversized-client.mjs ended before %s:\n%s", what, stderr)
				}
				return ev
			case <-time.After(oversizedCallTimeout + 30*time.Second):
				t.Fatalf("oversized-client.mjs printed nothing for %s: %s\n%s", what, oversizedCallTimeout+30*time.Second, stderr)
			}
			return oversizedEvent{}
		}
		ready := next("the warm-up call")
		if ready.Event != "ready" || ready.PID <= 0 {
			t.Fatalf("the client's first line: %+v\n%s", ready, stderr)
		}
		w := watchStats(t, debugAddr)
		base, err := w.read()
		if err != nil {
			t.Fatal(err)
		}
		hwmBefore := peakRSS(t, ready.PID)
		w.reset()
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatal(err)
		}

		got := map[string]oversizedEvent{}
		for range 2 {
			ev := next("the answers to both calls")
			got[ev.Event] = ev
		}
		peak, err := w.window()
		if err != nil {
			t.Fatal(err)
		}
		hwmAfter := peakRSS(t, ready.PID)
		large, small := got["large"], got["small"]
		t.Logf("the 12 MB call answered in %d ms (code %d), the call behind it in %d ms", large.MS, large.Code, small.MS)
		t.Logf("RSS %.1f MiB before, peak %.1f MiB while the bridge read 12 MB (VmHWM %.1f then %.1f MiB)",
			mb(base.RSS), mb(peak.RSS), mb(hwmBefore), mb(hwmAfter))
		if large.Code != -32600 || !strings.Contains(large.Message, "over the limit of 4194304 bytes (sandbox.max_request_bytes)") {
			t.Errorf("the 12 MB call: %+v, want its own error -32600 naming sandbox.max_request_bytes (-32001 is the client's timeout: the answer did not carry the call's id)\n%s", large, stderr)
		}
		if small.Result == nil || small.Result.StructuredContent.Status != "ok" || small.Result.StructuredContent.Stdout != "42\n" {
			t.Errorf("the call right behind the 12 MB line: %+v\n%s", small, stderr)
		}
		// The bridge holds at most the limit (4 MiB, in a buffer that
		// doubles) of the line: before the limit, 12 MB of code took a
		// serve to 108 MiB; TestRequestBounds sees 64-69 MiB peaks.
		if grew := peak.RSS - base.RSS; grew > 32<<20 || hwmAfter > 96<<20 {
			t.Errorf("the bridge's RSS grew by %.1f MiB (to a peak of %.1f MiB) while it read a 12 MB line: it held the line", mb(grew), mb(hwmAfter))
		}
	})
}
