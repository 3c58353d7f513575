package integration

// Watching a running `bridge serve` from the outside: its /debug/stats
// endpoint (serve --debug-addr) and its CPU time in /proc. TestHostile uses
// these to prove that an attack from the sandbox does not grow the bridge.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/sandbox"
)

// bridgeStats is the part of /debug/stats the tests watch.
type bridgeStats struct {
	Goroutines int    `json:"goroutines"`
	HeapAlloc  uint64 `json:"heap_alloc_bytes"`
	RSS        int64  `json:"rss_bytes"`
	OpenFDs    int    `json:"open_fds"`
	// Pool is the warm pool's state, once the engine is open.
	Pool *struct {
		Size int `json:"size"`
		// Target is what the pool aims to keep now: its size, or more
		// after it grew under demand (up to pool.max).
		Target   int `json:"target"`
		Ready    int `json:"ready"`
		Starting int `json:"starting"`
		Removing int `json:"removing"`
	} `json:"pool"`
	// ToolCalls is how long the latest tool calls took (toolhost.CallTimesSummary).
	ToolCalls *toolhost.CallTimesSummary `json:"tool_calls"`
}

// poolSettled reports whether the warm pool is full (its target, which
// may be above its size after a burst) and idle (or absent):
// the moment a baseline of goroutines and fds may be taken, since each
// ready container holds its connection's.
func (s bridgeStats) poolSettled() bool {
	p := s.Pool
	return p == nil || (p.Ready == p.Target && p.Starting == 0 && p.Removing == 0)
}

// What one ready container holds in the bridge (its relay connection, the
// engine's wait on it): 4 goroutines and 2 open files measured on Docker,
// with a margin.
const readyGoroutines, readyFDs = 5, 3

// poolGrowth is how many more containers the warm pool holds ready in s
// than in base: it grows under bursts (up to pool.max) and holds them
// until pool.shrink_after, each with its goroutines and files, which a
// comparison with base must allow.
func (s bridgeStats) poolGrowth(base bridgeStats) int {
	if s.Pool == nil || base.Pool == nil {
		return 0
	}
	return max(0, s.Pool.Ready-base.Pool.Ready)
}

// backTo reports whether s has at most base's goroutines and open files,
// plus g and f, plus what the pool's growth since base holds.
func (s bridgeStats) backTo(base bridgeStats, g, f int) bool {
	n := s.poolGrowth(base)
	return s.Goroutines <= base.Goroutines+g+n*readyGoroutines && s.OpenFDs <= base.OpenFDs+f+n*readyFDs
}

// max returns the field-wise maximum of s and o, with o's pool: o is
// the newer reading, and the pool's state is a fact of now, not a peak.
// (Without it, a baseline taken as a window had no pool, and a soak whose
// burst grew the pool, which holds its ready containers' goroutines and
// files until it shrinks a minute later, failed: TestSoak on rootless
// Podman, +12 goroutines and +10 fds for 6 more ready containers.)
func (s bridgeStats) max(o bridgeStats) bridgeStats {
	return bridgeStats{
		Goroutines: max(s.Goroutines, o.Goroutines),
		HeapAlloc:  max(s.HeapAlloc, o.HeapAlloc),
		RSS:        max(s.RSS, o.RSS),
		OpenFDs:    max(s.OpenFDs, o.OpenFDs),
		Pool:       o.Pool,
	}
}

// freeLoopbackAddr returns 127.0.0.1:PORT with a port that was free a
// moment ago (listen on port 0, take the port, close).
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// statsWatcher polls a bridge's /debug/stats and keeps the peak of each
// field since the last reset.
type statsWatcher struct {
	url    string
	client *http.Client

	mu   sync.Mutex
	peak bridgeStats
	err  error // the first failed poll since the last reset

	stop chan struct{}
	done chan struct{}
}

// statsPollInterval is how often the watcher polls. RSS falls slowly (the Go
// runtime returns memory to the OS lazily), so a peak between two polls is
// still seen at the next one.
const statsPollInterval = 150 * time.Millisecond

// watchStats waits until the debug endpoint at addr answers, then polls it
// in the background until the test ends.
func watchStats(t testing.TB, addr string) *statsWatcher {
	t.Helper()
	w := &statsWatcher{
		url: "http://" + addr + "/debug/stats",
		// One keep-alive connection: the poller adds one steady goroutine
		// to the bridge, not one per poll.
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := w.read(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the bridge's debug endpoint %s never answered: %v", w.url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	go w.loop()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
		w.client.CloseIdleConnections()
	})
	return w
}

// read fetches the stats once.
func (w *statsWatcher) read() (bridgeStats, error) {
	var s bridgeStats
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	if err != nil {
		return s, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", w.url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, err
	}
	if s.RSS <= 0 || s.Goroutines <= 0 || s.OpenFDs <= 0 {
		return s, fmt.Errorf("GET %s: implausible stats %+v", w.url, s)
	}
	return s, nil
}

func (w *statsWatcher) loop() {
	defer close(w.done)
	tick := time.NewTicker(statsPollInterval)
	defer tick.Stop()
	for {
		s, err := w.read()
		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = err
		}
		w.peak = w.peak.max(s)
		w.mu.Unlock()
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

// reset starts a new peak window from the current stats.
func (w *statsWatcher) reset() {
	s, err := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peak, w.err = s, err
}

// window returns the peaks since the last reset and the first poll error.
func (w *statsWatcher) window() (bridgeStats, error) {
	s, err := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && w.err == nil {
		w.err = err
	}
	w.peak = w.peak.max(s)
	return w.peak, w.err
}

// goroutineDump is the bridge's goroutine profile in text, cut to limit
// bytes: what a failure report needs to show where goroutines are stuck.
func (w *statsWatcher) goroutineDump(limit int) string {
	url := strings.TrimSuffix(w.url, "/stats") + "/pprof/goroutine?debug=1"
	resp, err := w.client.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, int64(limit)))
	return string(b)
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is the CPU time process pid has used so far, user plus system.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// The command name may contain spaces and parentheses: the fields
	// that count start after the last ')'. utime and stime are fields 14
	// and 15 of the line, so 12 and 13 after the state (field 3).
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	var ticks int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// cpuShare is the share of one core process pid uses over d.
func cpuShare(pid int, d time.Duration) (float64, error) {
	a, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	b, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	return float64(b-a) / float64(d), nil
}

// startTime is field 22 of /proc/PID/stat, the process's start time in clock
// ticks since boot, or "" when pid does not run.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// containersOf lists the containers on e that the bridge process pid made:
// their owner label ends in PID/START (sandbox.LabelOwner), so a bridge of
// someone else's that happens to have the same PID in another PID namespace
// is not taken for this one.
func containersOf(t *testing.T, e *engine, pid int) []sandbox.ContainerInfo {
	t.Helper()
	start := startTime(pid)
	if start == "" {
		t.Fatalf("the bridge (pid %d) is not running", pid)
	}
	cs, err := e.rt.List(context.Background(), map[string]string{sandbox.LabelManaged: "true"})
	if err != nil {
		t.Fatal(err)
	}
	var mine []sandbox.ContainerInfo
	for _, c := range cs {
		if strings.HasSuffix(c.Labels[sandbox.LabelOwner], fmt.Sprintf("/%d/%s", pid, start)) {
			mine = append(mine, c)
		}
	}
	return mine
}

// settledStats reads the bridge's stats once its warm pool is full and
// idle, so that two readings compare like with like.
func settledStats(t *testing.T, addr string) bridgeStats {
	t.Helper()
	var st bridgeStats
	waitFor(t, 30*time.Second, "the warm pool full and idle", func() bool {
		st = debugStats(t, addr)
		return st.poolSettled()
	})
	return st
}
