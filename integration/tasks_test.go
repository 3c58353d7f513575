package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// tasksPolicy writes a policy with a warm pool of pool, sessions and tasks
// (a call answered by a task after 500 ms, at most perPrincipal running of
// one principal, results kept resultTTL) and timeouts up to maxTimeout.
func tasksPolicy(t *testing.T, e *engine, pool, perPrincipal int, resultTTL, maxTimeout string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + "  max_timeout: " + maxTimeout + "\n  max_concurrent: 8\n" + fmt.Sprintf("pool:\n  size: %d\n", pool) + "sessions:\n  enabled: true\n" +
		fmt.Sprintf("tasks:\n  after: 500ms\n  max_per_principal: %d\n  result_ttl: %s\n", perPrincipal, resultTTL)
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runTask calls run_python with args as a client that declares the Tasks
// extension, and returns the answer.
func runTask(t *testing.T, endpoint, token string, args map[string]any) map[string]any {
	t.Helper()
	session, _ := args["session"].(string)
	res, err := modernCall(t, endpoint, token, "tools/call", "run_python", session, map[string]any{"name": "run_python", "arguments": args}, true)
	if err != nil {
		t.Fatalf("tools/call %v: %v", args, err)
	}
	return res
}

// TestTasks: over HTTP, a 2026-07-28 client that declares the Tasks
// extension gets a task for a run still going after tasks.after: it polls
// tasks/get (working, with the run's latest line as statusMessage, then
// completed with the result); a quick run is answered at once; a task in
// a session keeps the session; tasks/cancel stops a run and its container
// goes; another principal cannot see or cancel a task; a flood of tasks is
// refused past tasks.max_per_principal; a result never fetched expires; a
// task of a bridge that restarted is reported lost, not unknown.
func TestTasks(t *testing.T) {
	forEngines(t, aboveEngine("tasks over HTTP"), func(t *testing.T, e *engine) {
		const alice, bob = "alice-0123456789abcdef0123456789abcdef", "bob-0123456789abcdef0123456789abcdef01"
		args, _ := serveArgs(e)
		// As users run it: a warm pool of 1.
		bridgeArgs := append(withoutSandboxFlags(args), "--policy", tasksPolicy(t, e, 1, 3, "10s", "10m"),
			"--principals", principalsFile(t, "alice "+alice, "bob "+bob))
		debug := freeLoopbackAddr(t)
		addr, pid := startHTTPBridge(t, e, append(slices.Clone(bridgeArgs), "--debug-addr", debug))
		endpoint := "http://" + addr + "/mcp"
		// settled: the pool full, nothing starting or being removed, and
		// the bridge's containers those and the session's: no run's is
		// left.
		settled := func(what string) {
			t.Helper()
			awaitQuiet(t, debug, 1)
			waitFor(t, 30*time.Second, what, func() bool { return len(ownedIDs(t, e, pid)) == 2 })
			// Still so once the pool is quiet again: no run's container
			// hid behind one the pool had not yet started.
			awaitQuiet(t, debug, 1)
			if ids := ownedIDs(t, e, pid); len(ids) != 2 {
				t.Fatalf("%s: %d containers, want the pool's and the session's", what, len(ids))
			}
		}

		if res := runTask(t, endpoint, alice, map[string]any{"code": "print(6*7)"}); res["resultType"] != "complete" || !strings.Contains(fmt.Sprint(res["content"]), "42") {
			t.Fatalf("a quick run: %v", res)
		}
		res := runTask(t, endpoint, alice, map[string]any{"code": "import time\nx = 41\nprint('warming up', flush=True)\ntime.sleep(3)\nprint(x + 1)", "session": "s"})
		id, _ := res["taskId"].(string)
		if res["resultType"] != "task" || res["status"] != "working" || id == "" {
			t.Fatalf("a 3 s run: %v", res)
		}
		got, jerr := modernCall(t, endpoint, alice, "tasks/get", id, "", map[string]any{"taskId": id}, true)
		if jerr != nil || got["status"] != "working" || got["resultType"] != "complete" {
			t.Errorf("tasks/get while it runs: %v %v", got, jerr)
		}
		for _, m := range []string{"tasks/get", "tasks/cancel"} {
			if _, jerr := modernCall(t, endpoint, bob, m, id, "", map[string]any{"taskId": id}, true); jerr == nil || jerr.Code != jsonrpc.CodeInvalidParams {
				t.Errorf("bob's %s of alice's task: %v", m, jerr)
			}
		}
		got = awaitModernTask(t, endpoint, alice, id, time.Minute)
		result, _ := got["result"].(map[string]any)
		if got["status"] != "completed" || !strings.Contains(fmt.Sprint(result["content"]), "warming up\n42") {
			t.Fatalf("the task's end: %v", got)
		}
		// The task ran in the session: it is there for the next call.
		if res := runTask(t, endpoint, alice, map[string]any{"code": "print(x)", "session": "s"}); !strings.Contains(fmt.Sprint(res["content"]), "41") {
			t.Errorf("the session after its task: %v", res)
		}

		// Cancel: the run stops, its container goes.
		settled("before the cancel")
		rss0 := debugStats(t, debug).RSS
		res = runTask(t, endpoint, alice, map[string]any{"code": "import time\ntime.sleep(300)"})
		cancelled, _ := res["taskId"].(string)
		if cancelled == "" {
			t.Fatalf("a 300 s run: %v", res)
		}
		if _, jerr := modernCall(t, endpoint, alice, "tasks/cancel", cancelled, "", map[string]any{"taskId": cancelled}, true); jerr != nil {
			t.Fatal(jerr)
		}
		if got := awaitModernTask(t, endpoint, alice, cancelled, 30*time.Second); got["status"] != "cancelled" {
			t.Errorf("the cancelled task: %v", got)
		}
		settled("the cancelled task's container removed")

		// A flood: past 3 running tasks of one principal, refused, clearly;
		// another principal's are its own.
		var flood []string
		for i := range 5 {
			res := runTask(t, endpoint, alice, map[string]any{"code": "import time\ntime.sleep(60)"})
			if i < 3 {
				if res["resultType"] != "task" {
					t.Fatalf("task %d of the flood: %v", i, res)
				}
				flood = append(flood, res["taskId"].(string))
				continue
			}
			if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "tasks.max_per_principal") {
				t.Errorf("task %d of the flood: %v", i, res)
			}
		}
		if res := runTask(t, endpoint, bob, map[string]any{"code": "import time\ntime.sleep(2)\nprint('bob')"}); res["resultType"] != "task" {
			t.Errorf("bob's task during alice's flood: %v", res)
		} else {
			// Never fetched: kept 10 s (tasks.result_ttl), then unknown.
			bobs := res["taskId"].(string)
			time.Sleep(2*time.Second + 10*time.Second + time.Second)
			if _, jerr := modernCall(t, endpoint, bob, "tasks/get", bobs, "", map[string]any{"taskId": bobs}, true); jerr == nil || !strings.Contains(jerr.Message, "tasks.result_ttl") {
				t.Errorf("a result never fetched, past result_ttl: %v", jerr)
			}
		}
		for _, id := range flood {
			if _, jerr := modernCall(t, endpoint, alice, "tasks/cancel", id, "", map[string]any{"taskId": id}, true); jerr != nil {
				t.Error(jerr)
			}
		}
		settled("the flood's containers removed")
		t.Logf("bridge RSS %s before the cancel and the flood, %s after", mib(rss0), mib(debugStats(t, debug).RSS))

		// A restart: the old bridge's task is reported lost.
		res = runTask(t, endpoint, alice, map[string]any{"code": "import time\ntime.sleep(60)"})
		lost, _ := res["taskId"].(string)
		// A second SIGINT ends the drain at once: the task's run is
		// cancelled, its container removed.
		_ = syscall.Kill(pid, syscall.SIGINT)
		time.Sleep(200 * time.Millisecond)
		stopHTTPBridge(t, e, pid)
		addr2, _ := startHTTPBridge(t, e, bridgeArgs)
		if _, jerr := modernCall(t, "http://"+addr2+"/mcp", alice, "tasks/get", lost, "", map[string]any{"taskId": lost}, true); jerr == nil || !strings.Contains(jerr.Message, "the bridge restarted since it made it") {
			t.Errorf("a task of the bridge before its restart: %v", jerr)
		}
	})
}

// TestTaskTenMinutes: a 10-minute run as a task, polled at the interval
// the bridge advises, with its latest line of output as statusMessage,
// then its result. It runs in a pass of its own beside the others
// (make integration-long, BRIDGE_TEST_LONG=1): ten minutes of a serial
// suite would be ten minutes of CI.
func TestTaskTenMinutes(t *testing.T) {
	if os.Getenv("BRIDGE_TEST_LONG") != "1" {
		t.Skip("the 10-minute task runs beside the suite: make integration-long (BRIDGE_TEST_LONG=1)")
	}
	e := enginesFor(t, only("a long task does not depend on the engine", kindDocker))[0]
	args, _ := serveArgs(e)
	const token = "long-0123456789abcdef0123456789abcdef"
	addr, pid := startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--policy", tasksPolicy(t, e, 0, 2, "10m", "15m"),
		"--principals", principalsFile(t, "long "+token)))
	endpoint := "http://" + addr + "/mcp"
	start := time.Now()
	res := runTask(t, endpoint, token, map[string]any{"timeout_seconds": 700, "code": "import time\nfor i in range(10):\n    print(f'minute {i}', flush=True)\n    time.sleep(60)\nprint('done')"})
	id, _ := res["taskId"].(string)
	if id == "" {
		t.Fatalf("a 10-minute run: %v", res)
	}
	seen := map[string]bool{}
	polls := 0
	for {
		got, jerr := modernCall(t, endpoint, token, "tasks/get", id, "", map[string]any{"taskId": id}, true)
		if jerr != nil {
			t.Fatalf("tasks/get after %s: %v", time.Since(start).Round(time.Second), jerr)
		}
		polls++
		if msg, _ := got["statusMessage"].(string); got["status"] == "working" && msg != "" {
			seen[msg] = true
		}
		if got["status"] != "working" {
			result, _ := got["result"].(map[string]any)
			if got["status"] != "completed" || !strings.Contains(fmt.Sprint(result["content"]), "minute 9\ndone") {
				t.Fatalf("the 10-minute task ended %v", got)
			}
			break
		}
		if time.Since(start) > 12*time.Minute {
			t.Fatalf("the task still works after %s", time.Since(start).Round(time.Second))
		}
		if n := len(ownedIDs(t, e, pid)); n != 1 {
			t.Fatalf("%d containers while the task runs, want its 1", n)
		}
		time.Sleep(time.Duration(got["pollIntervalMs"].(float64)) * time.Millisecond)
	}
	for i := range 10 {
		if !seen[fmt.Sprintf("minute %d", i)] {
			t.Errorf("no poll said %q: %v", fmt.Sprintf("minute %d", i), seen)
		}
	}
	t.Logf("a 10-minute task: %d polls over %s", polls, time.Since(start).Round(time.Second))
}
