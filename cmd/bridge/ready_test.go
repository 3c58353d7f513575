package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

func TestEngineCheck(t *testing.T) {
	for _, tc := range []struct {
		err   error
		ok    bool
		state string
	}{
		{nil, true, "ready"},
		{sandbox.ErrEngineOpening, false, "opening"},
		{fmt.Errorf("runner image x: %w", sandbox.ErrImageNotFound), false, "image missing"},
		{&sandbox.UnavailableError{Err: fmt.Errorf("dial: %w", sandbox.ErrEngineUnreachable)}, false, "unreachable"},
		{context.DeadlineExceeded, false, "not answering"},
		{errors.New("odd"), false, "unavailable"},
	} {
		c := engineCheck(tc.err)
		if c.OK != tc.ok || c.State != tc.state || (tc.err != nil && c.Detail == "") {
			t.Errorf("engineCheck(%v) = %+v, want ok %v state %q", tc.err, c, tc.ok, tc.state)
		}
	}
}

func TestPoolCheck(t *testing.T) {
	for _, tc := range []struct {
		st    *sandbox.PoolStats
		ok    bool
		state string
	}{
		{nil, true, "not started"},
		{&sandbox.PoolStats{Size: 2, Ready: 2}, true, "ready"},
		{&sandbox.PoolStats{Size: 2, Ready: 0, Starting: 2}, true, "filling"},
		// A failure while some are ready: runs still start warm.
		{&sandbox.PoolStats{Size: 2, Ready: 1, LastError: "boom"}, true, "filling"},
		{&sandbox.PoolStats{Size: 2, Ready: 0, LastError: "boom", Failures: 3}, false, "failing"},
	} {
		c := poolCheck(tc.st)
		if c.OK != tc.ok || c.State != tc.state {
			t.Errorf("poolCheck(%+v) = %+v, want ok %v state %q", tc.st, c, tc.ok, tc.state)
		}
	}
}

func TestUpstreamsCheck(t *testing.T) {
	ready := proxy.ServerStatus{Name: "a", State: "ready"}
	idle := proxy.ServerStatus{Name: "b", State: "idle"}
	down := proxy.ServerStatus{Name: "c", State: "unavailable", Error: "exited"}
	for _, tc := range []struct {
		st    []proxy.ServerStatus
		known bool
		ok    bool
		state string
	}{
		{nil, false, false, "connecting"},
		{nil, true, true, "none configured"},
		{[]proxy.ServerStatus{ready, idle}, true, true, "ready"},
		{[]proxy.ServerStatus{ready, down}, true, true, "degraded"},
		{[]proxy.ServerStatus{down}, true, false, "unavailable"},
	} {
		c := upstreamsCheck(tc.st, tc.known)
		if c.OK != tc.ok || c.State != tc.state {
			t.Errorf("upstreamsCheck(%v, %v) = %+v, want ok %v state %q", tc.st, tc.known, c, tc.ok, tc.state)
		}
		if tc.state == "degraded" && !strings.Contains(c.Detail, "c: exited") {
			t.Errorf("the failed server is not named: %+v", c)
		}
	}
}

// The proxy's readiness refreshes in the background: a probe never waits
// for the upstreams to connect.
func TestProxyReadinessDoesNotWait(t *testing.T) {
	release := make(chan struct{})
	r := proxyReadiness(func(context.Context) []proxy.ServerStatus {
		<-release
		return []proxy.ServerStatus{{Name: "a", State: "ready"}}
	}, zerolog.Nop())
	start := time.Now()
	if c := r(context.Background()); c[0].OK || c[0].State != "connecting" {
		t.Fatalf("before the first refresh: %+v", c)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Fatal("the probe waited for the refresh")
	}
	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if c := r(context.Background()); c[0].OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready after the refresh")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDrainTimeoutOf(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		stdio bool
		want  time.Duration
		err   bool
	}{
		{nil, false, DefaultDrainTimeout, false},
		{nil, true, 0, false},
		{[]string{"--drain-timeout", "10s"}, true, 10 * time.Second, false},
		{[]string{"--drain-timeout", "0"}, false, 0, false},
		{[]string{"--drain-timeout", "-1s"}, false, 0, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		d := drainFlag(fs, "the runs")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := drainTimeoutOf(fs, *d, tc.stdio)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%v stdio %v: %v, %v; want %v (error %v)", tc.args, tc.stdio, got, err, tc.want, tc.err)
		}
	}
}
