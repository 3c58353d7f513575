package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/sandbox"
)

// The warm pool through `bridge serve`: a pooled container runs code once,
// a reload that changes the limits replaces the pool's containers, the
// pool survives its engine going away, and no pooled container outlives
// the bridge.

// poolBridge starts `bridge serve` on e with a policy file whose pool has
// size containers (sandboxExtra is added to its sandbox section), and
// --debug-addr.
func poolBridge(t *testing.T, e *engine, size int, sandboxExtra string) (cs *mcp.ClientSession, pid int, stderr *syncBuffer, debugAddr, policyFile string) {
	t.Helper()
	return poolBridgeMax(t, e, size, size, sandboxExtra)
}

// poolBridgeMax is poolBridge with the pool's max; 0 leaves the default,
// as users run it.
func poolBridgeMax(t *testing.T, e *engine, size, maxSize int, sandboxExtra string) (cs *mcp.ClientSession, pid int, stderr *syncBuffer, debugAddr, policyFile string) {
	t.Helper()
	policyFile = filepath.Join(t.TempDir(), "policy.yaml")
	writePoolPolicyMax(t, e, policyFile, size, maxSize, sandboxExtra)
	debugAddr = freeLoopbackAddr(t)
	cs, pid, stderr = connectStdioArgs(t, e, nil, "--policy", policyFile, "--debug-addr", debugAddr)
	return cs, pid, stderr, debugAddr, policyFile
}

// writePoolPolicy writes a policy whose pool holds size containers and
// does not grow (max = size): the tests that use it count ready containers,
// and a pool grown by their runs' misses would hold more than its size for
// pool.shrink_after (a minute) and pass "N ready" between two polls.
// TestPoolGrowsAndShrinks and the burst and sustained benches test growth.
func writePoolPolicy(t *testing.T, e *engine, path string, size int, sandboxExtra string) {
	t.Helper()
	writePoolPolicyMax(t, e, path, size, size, sandboxExtra)
}

// writePoolPolicyMax is writePoolPolicy with the pool's max; 0 leaves the
// default.
func writePoolPolicyMax(t *testing.T, e *engine, path string, size, maxSize int, sandboxExtra string) {
	t.Helper()
	pool := fmt.Sprintf("pool:\n  size: %d\n", size)
	if maxSize > 0 {
		pool += fmt.Sprintf("  max: %d\n", maxSize)
	}
	pol := "version: 1\n" + sandboxSection(e) + sandboxExtra + pool
	// Write and rename, so that the bridge never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// poolStats reads the pool's state from the bridge's /debug/stats; ok is
// false before the engine is open.
func poolStats(t *testing.T, addr string) (sandbox.PoolStats, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/stats")
	if err != nil {
		return sandbox.PoolStats{}, false
	}
	defer resp.Body.Close()
	var st struct {
		Pool *sandbox.PoolStats `json:"pool"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Pool == nil {
		return sandbox.PoolStats{}, false
	}
	return *st.Pool, true
}

// awaitPool waits until ok says yes of the pool's state.
func awaitPool(t *testing.T, addr string, within time.Duration, what string, ok func(sandbox.PoolStats) bool) sandbox.PoolStats {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, have := poolStats(t, addr)
		if have && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not get %s within %s: %+v", what, within, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A pooled container is never used twice: each run looks for the marker
// the run before it left in /tmp, and writes its own.
func TestPoolNeverReused(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		cs, _, stderr, addr, _ := poolBridge(t, e, 2, "")
		awaitPool(t, addr, 60*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		w := watchStats(t, addr)
		mustRun(t, cs, "pass") // the first run's one-off costs are not the baseline
		awaitPool(t, addr, 30*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		base, err := w.read()
		if err != nil {
			t.Fatal(err)
		}
		const runs = 12
		code := "import os\nm = '/tmp/marker'\nprint('seen' if os.path.exists(m) else 'fresh')\nopen(m, 'w').write('x')\nprint(os.getpid())"
		for i := range runs {
			out := mustRun(t, cs, code)
			if !strings.HasPrefix(out, "fresh\n") {
				t.Fatalf("run %d found the marker of an earlier run: %q\n%s", i, out, stderr.String())
			}
			// As an agent would call: the pool refills between calls.
			awaitPool(t, addr, 30*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		}
		// What the pool holds per run is given back: goroutines and fds
		// return to the baseline once removals are done.
		awaitPool(t, addr, 30*time.Second, "no removal in flight", func(s sandbox.PoolStats) bool { return s.Removing == 0 && s.Ready == 2 })
		var end bridgeStats
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if end, err = w.read(); err != nil {
				t.Fatal(err)
			}
			if end.backTo(base, 2, 2) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d warm runs: %d goroutines (%d before), %d fds (%d before)", runs, end.Goroutines, base.Goroutines, end.OpenFDs, base.OpenFDs)
			}
		}
		t.Logf("bridge: %d goroutines, %d fds, RSS %.1f MB before %d runs; %d, %d, %.1f MB after",
			base.Goroutines, base.OpenFDs, float64(base.RSS)/1e6, runs, end.Goroutines, end.OpenFDs, float64(end.RSS)/1e6)
		st, _ := poolStats(t, addr)
		if st.Hits < runs+1 {
			t.Fatalf("only %d of %d runs were warm (else this test proves little): %+v", st.Hits, runs+1, st)
		}
		t.Logf("pool after %d runs: %+v", runs, st)
	})
}

// memoryLimitCode prints the memory limit of the container's cgroup, read
// from inside (cgroup v2, else v1).
const memoryLimitCode = `import os
for p in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
    if os.path.exists(p):
        print(open(p).read().strip())
        break
else:
    print('none')`

// A reload that changes the memory limit drains the pool: the next run,
// warm, sees the new limit in its cgroup.
func TestPoolReloadChangesLimits(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		cs, _, stderr, addr, policyFile := poolBridge(t, e, 1, "")
		awaitPool(t, addr, 60*time.Second, "1 ready", func(s sandbox.PoolStats) bool { return s.Ready == 1 })
		before := strings.TrimSpace(mustRun(t, cs, memoryLimitCode))
		st0 := awaitPool(t, addr, 30*time.Second, "1 ready", func(s sandbox.PoolStats) bool { return s.Ready == 1 })

		writePoolPolicy(t, e, policyFile, 1, "  memory: 200Mi\n")
		// The ready container of the old limits goes, a new one comes.
		st := awaitPool(t, addr, 60*time.Second, "a container of the new limits", func(s sandbox.PoolStats) bool {
			return s.Discarded > st0.Discarded && s.Ready == 1
		})
		after := strings.TrimSpace(mustRun(t, cs, memoryLimitCode))
		st2, _ := poolStats(t, addr)
		if st2.Hits != st.Hits+1 {
			t.Fatalf("the run after the reload was not warm: %+v then %+v\n%s", st, st2, stderr.String())
		}
		if !e.enforced {
			t.Logf("%s does not enforce memory limits here: limit %s before, %s after", e.name, before, after)
			return
		}
		if want := strconv.Itoa(200 << 20); after != want || before == want {
			t.Fatalf("cgroup memory limit: %s before the reload, %s after; want %s after", before, after, want)
		}
	})
}

// The engine stops under a full pool and starts again: the pool's failed
// starts are logged, runs start cold meanwhile, and the pool fills again
// without a restart of the bridge.
func TestPoolEngineRestart(t *testing.T) {
	if rootless() {
		t.Skip("restarting an engine needs root: the rootful run tests it on docker and podman")
	}
	forEngines(t, except("engine.sh stops and starts the Docker and Podman daemons that setup.sh started; "+
		"the test cluster's API server and kubelet are not an engine a test may stop under the bridge", kindKubernetes), func(t *testing.T, e *engine) {
		needOwnEngine(t, e)
		cs, _, stderr, addr, _ := poolBridge(t, e, 2, "")
		awaitPool(t, addr, 60*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		startAgain := stopEngine(t, e)
		awaitPool(t, addr, 60*time.Second, "a failed start", func(s sandbox.PoolStats) bool { return s.Failures > 0 && s.Ready == 0 })
		startAgain()
		// The first run after: warm if the pool already refilled, else
		// cold, but it runs.
		if out := mustRun(t, cs, "print(6*7)"); out != "42\n" {
			t.Fatalf("after the engine came back: %q\n%s", out, stderr.String())
		}
		st := awaitPool(t, addr, 90*time.Second, "2 ready again", func(s sandbox.PoolStats) bool { return s.Ready == 2 && s.LastError == "" })
		mustRun(t, cs, "print(1)")
		st2, _ := poolStats(t, addr)
		if st2.Hits != st.Hits+1 {
			t.Fatalf("the pool refilled but the run was not warm: %+v then %+v", st, st2)
		}
		awaitLog(t, stderr, "the pool's failed starts", func(log string) bool {
			return strings.Contains(log, "pool: starting a container failed")
		})
		t.Logf("pool after the restart: %+v", st2)
	})
}

// No pooled container outlives `bridge serve`: it removes them when stdin
// ends or on SIGTERM, and after a SIGKILL the next bridge's start does.
func TestPoolShutdown(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		for _, how := range []string{"stdin EOF", "SIGTERM", "SIGKILL"} {
			t.Run(how, func(t *testing.T) {
				policyFile := filepath.Join(t.TempDir(), "policy.yaml")
				writePoolPolicy(t, e, policyFile, 3, "")
				addr := freeLoopbackAddr(t)
				args, env := serveArgs(e)
				args = append(withoutSandboxFlags(args), "--policy", policyFile, "--debug-addr", addr)
				cmd := exec.Command(testSuite.bridgeBin, args...)
				cmd.Env = append(os.Environ(), env...)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				stderr := &syncBuffer{}
				cmd.Stderr = stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer cmd.Process.Kill()
				pid := cmd.Process.Pid
				awaitPool(t, addr, 60*time.Second, "3 ready", func(s sandbox.PoolStats) bool { return s.Ready == 3 })
				if n := ownedBy(t, e, pid); n != 3 {
					t.Fatalf("%d containers of the bridge with a full pool of 3", n)
				}
				start := time.Now()
				switch how {
				case "stdin EOF":
					stdin.Close()
				case "SIGTERM":
					cmd.Process.Signal(syscall.SIGTERM)
				case "SIGKILL":
					cmd.Process.Signal(syscall.SIGKILL)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err := <-done:
					if how != "SIGKILL" && err != nil {
						t.Fatalf("bridge serve exited with %v\n%s", err, stderr.String())
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("bridge serve still runs 10 s after %s", how)
				}
				t.Logf("exited %s after %s", time.Since(start).Round(time.Millisecond), how)
				if how != "SIGKILL" {
					if n := ownedBy(t, e, pid); n != 0 {
						t.Fatalf("%d pooled containers left after %s\n%s", n, how, stderr.String())
					}
					return
				}
				if n := ownedBy(t, e, pid); n == 0 {
					t.Fatal("nothing left after SIGKILL: this test proves nothing")
				}
				// The next bridge reaps them when it opens the engine,
				// which a pool does at start.
				_, _, stderr2, addr2, _ := poolBridge(t, e, 1, "")
				awaitPool(t, addr2, 60*time.Second, "1 ready", func(s sandbox.PoolStats) bool { return s.Ready == 1 })
				deadline := time.Now().Add(30 * time.Second)
				for ownedBy(t, e, pid) != 0 {
					if time.Now().After(deadline) {
						t.Fatalf("the killed bridge's containers are still there:\n%s", stderr2.String())
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	})
}

// A mounted folder replaced or deleted on the host while the pool holds
// containers that mounted it: through `bridge serve`, pool on, no run
// reads the old (now empty) folder from a ready container. A replaced
// folder is read as it is now; a deleted one fails every run, warm or not,
// with the error of a run that starts its own container; the stale ready
// containers are discarded, and the pool recovers once the folder is back.
func TestPoolMountDeleted(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		sales, _ := mountedFolder(t)
		cs, _, stderr, addr, _ := poolBridge(t, e, 2, "mounts:\n  - host: "+sales+"\n")
		awaitPool(t, addr, 60*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		const read = "import os\nprint(sorted(os.listdir('/data/sales')))\nprint(open('/data/sales/sales.csv').read(), end='')"
		if out := mustRun(t, cs, read); !strings.Contains(out, "north,12") {
			t.Fatalf("the mounted CSV: %q", out)
		}
		awaitPool(t, addr, 30*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })

		// Replaced: the ready containers hold the old folder, empty now.
		fill := func(csv string) {
			t.Helper()
			if err := os.Mkdir(sales, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sales, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sales, "sales.csv"), []byte(csv), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.RemoveAll(sales); err != nil {
			t.Fatal(err)
		}
		fill("region,amount\neast,7\n")
		for i := range 3 {
			if out := mustRun(t, cs, read); !strings.Contains(out, "east,7") {
				t.Fatalf("run %d after the folder was replaced read %q, not the new CSV", i, out)
			}
		}
		awaitPool(t, addr, 60*time.Second, "2 ready", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		before, _ := poolStats(t, addr)

		// Deleted: each run fails, naming the folder, as a cold run does.
		if err := os.RemoveAll(sales); err != nil {
			t.Fatal(err)
		}
		want := "the policy's mount " + sales + " → /data/sales: the host folder no longer exists: recreate it, or remove the mount from the policy"
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for i := range 3 {
			res, out := callRunPython(t, ctx, cs, read, nil)
			if !res.IsError || out.Status != "unavailable" || out.Stdout != "" || !strings.Contains(out.Message, want) {
				t.Fatalf("run %d after the folder was deleted: isError %v, %+v\nwant status unavailable and %q\nstderr:\n%s", i, res.IsError, out, want, stderr.String())
			}
		}
		after := awaitPool(t, addr, 10*time.Second, "nothing ready", func(s sandbox.PoolStats) bool { return s.Ready == 0 && s.Removing == 0 })
		if after.Hits != before.Hits || after.Discarded < before.Discarded+2 {
			t.Fatalf("pool before the deletion %+v, after 3 runs %+v: want no warm run and the 2 ready discarded", before, after)
		}

		// Back: the pool recovers on its own (its starts back off meanwhile).
		fill("region,amount\nwest,3\n")
		awaitPool(t, addr, 90*time.Second, "2 ready again", func(s sandbox.PoolStats) bool { return s.Ready == 2 })
		if out := mustRun(t, cs, read); !strings.Contains(out, "west,3") {
			t.Fatalf("the folder back: read %q", out)
		}
		if st, _ := poolStats(t, addr); st.Hits != after.Hits+1 {
			t.Fatalf("the run once the folder was back was not warm: %+v", st)
		}
	})
}

// A burst through `bridge serve` grows the pool past its size (runs miss,
// the target rises, up to pool.max and no further); once the burst is
// over the pool shrinks back to its size after pool.shrink_after; and when
// the bridge exits, none of its containers is left.
func TestPoolGrowsAndShrinks(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		const size, maxSize, burst = 1, 4, 12
		// The grown pool must be seen refilled before it shrinks: a pod
		// starts in a second or more (two at a time), so on a loaded node
		// refilling three took longer than 2 s and the pool shrank first.
		shrinkAfter := 2 * time.Second
		if e.cand.Engine == sandbox.EngineKubernetes {
			shrinkAfter = 8 * time.Second
		}
		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + fmt.Sprintf("pool:\n  size: %d\n  max: %d\n  shrink_after: %s\n", size, maxSize, shrinkAfter)
		if err := os.WriteFile(policyFile, []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		addr := freeLoopbackAddr(t)
		cs, pid, stderr := connectStdioArgs(t, e, nil, "--policy", policyFile, "--debug-addr", addr)
		awaitPool(t, addr, 60*time.Second, "1 ready", func(s sandbox.PoolStats) bool { return s.Ready == size })

		// The burst: more runs at once than the pool holds.
		errs := make(chan error, burst)
		for i := range burst {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				defer cancel()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": fmt.Sprintf("print(%d)", i)}})
				switch {
				case err != nil:
					errs <- err
				case res.IsError:
					errs <- fmt.Errorf("run %d: %s", i, contentText(res))
				default:
					errs <- nil
				}
			}()
		}
		// While the burst runs, the pool's ready and starting containers
		// stay within max.
		most, stop, polled := 0, make(chan struct{}), make(chan struct{})
		go func() {
			defer close(polled)
			for {
				if s, ok := poolStats(t, addr); ok {
					most = max(most, s.Ready+s.Starting, s.Target)
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		for range burst {
			if err := <-errs; err != nil {
				close(stop)
				<-polled
				t.Fatalf("%v\n%s", err, stderr.String())
			}
		}
		close(stop)
		<-polled
		// The burst's used containers are removed meanwhile; the engine
		// lists one until it is gone (a pod, a second or so).
		grown := awaitPool(t, addr, 60*time.Second, "grown, refilled and the used removed", func(s sandbox.PoolStats) bool {
			most = max(most, s.Ready+s.Starting)
			return s.Target > size && s.Ready == s.Target && s.Starting == 0 && s.Removing == 0
		})
		if grown.Grown == 0 || grown.Misses == 0 || grown.Target > maxSize || grown.Max != maxSize || most > maxSize {
			t.Fatalf("after a burst of %d: %+v (at most %d ready or starting); want misses, grown, target above %d and at most %d", burst, grown, most, size, maxSize)
		}
		if n := len(pooledOf(t, e, pid)); n > maxSize {
			t.Fatalf("%d pooled containers on the engine, pool.max %d", n, maxSize)
		}
		t.Logf("after the burst: %+v", grown)

		// Idle: back to the size after shrink_after (windows end on the
		// pool's 1 s check), a step at a time.
		shrunk := awaitPool(t, addr, 20*time.Second+time.Duration(maxSize)*shrinkAfter, "shrunk back to 1", func(s sandbox.PoolStats) bool {
			return s.Target == size && s.Ready == size && s.Removing == 0
		})
		if shrunk.Shrunk != grown.Shrunk+int64(grown.Target-size) {
			t.Fatalf("shrunk %d steps, want %d: %+v", shrunk.Shrunk-grown.Shrunk, grown.Target-size, shrunk)
		}
		deadline := time.Now().Add(20 * time.Second)
		for len(pooledOf(t, e, pid)) != size {
			if time.Now().After(deadline) {
				t.Fatalf("%d pooled containers on the engine after the shrink, want %d", len(pooledOf(t, e, pid)), size)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("idle: %+v", shrunk)
		// Still warm after the shrink.
		if out := mustRun(t, cs, "print('warm')"); out != "warm\n" {
			t.Fatalf("a run after the shrink printed %q", out)
		}

		// Shutdown: nothing of the bridge left on the engine.
		cs.Close()
		deadline = time.Now().Add(15 * time.Second)
		for !exited(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("bridge serve still runs 15 s after its client left\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := ownedBy(t, e, pid); n != 0 {
			t.Fatalf("%d containers of the bridge left after it exited\n%s", n, stderr.String())
		}
	})
}

// pooledOf lists the pool's containers of the bridge pid on e.
func pooledOf(t *testing.T, e *engine, pid int) []sandbox.ContainerInfo {
	t.Helper()
	var out []sandbox.ContainerInfo
	for _, c := range containersOf(t, e, pid) {
		if c.Labels[sandbox.LabelPooled] == "true" {
			out = append(out, c)
		}
	}
	return out
}
