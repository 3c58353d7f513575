package proxy

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// benchProxy is a proxy in this process with the test binary as its stdio
// upstream "alpha", and the bridge's client of it; both end with b.
func benchProxy(b *testing.B) *Client {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cfg := ServerConfig{Name: "alpha", Type: TypeStdio, Command: exe, Args: []string{"-test.run=^$"},
		Env: map[string]string{"PROXY_TEST_UPSTREAM": "1"}}
	p := New(Config{Servers: []ServerConfig{cfg}}, Options{Logger: zerolog.Nop()})
	b.Cleanup(p.Close)
	c, err := p.Connect(context.Background(), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkProxyBigResult: a 4 MiB text result from a stdio upstream
// through the proxy to the bridge's side, as JSON ready for the relay.
// MB/s is bytes of result per second.
func BenchmarkProxyBigResult(b *testing.B) {
	c := benchProxy(b)
	ctx := context.Background()
	const n = 4 << 20
	args := json.RawMessage(`{"n":4194304}`)
	if _, err := c.CallJSON(ctx, Call{RunID: "bench", Server: "alpha", Tool: "big", Args: args}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	for b.Loop() {
		js, err := c.CallJSON(ctx, Call{RunID: "bench", Server: "alpha", Tool: "big", Args: args})
		if err != nil || len(js) < n {
			b.Fatal(len(js), err)
		}
	}
}

// BenchmarkProxyBigResultsParallel: 16 calls at once, each a 4 MiB result,
// with the peak heap sampled while they run. peak-heap/in-flight is the
// peak heap (less the heap before) over the 64 MiB of results in flight.
func BenchmarkProxyBigResultsParallel(b *testing.B) {
	c := benchProxy(b)
	ctx := context.Background()
	const n, parallel = 4 << 20, 16
	args := json.RawMessage(`{"n":4194304}`)
	if _, err := c.CallJSON(ctx, Call{RunID: "bench", Server: "alpha", Tool: "big", Args: args}); err != nil {
		b.Fatal(err)
	}
	var peak atomic.Uint64
	b.SetBytes(n * parallel)
	for b.Loop() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > base {
					for d := ms.HeapAlloc - base; ; {
						old := peak.Load()
						if d <= old || peak.CompareAndSwap(old, d) {
							break
						}
					}
				}
			}
		}()
		var wg sync.WaitGroup
		for range parallel {
			wg.Go(func() {
				if js, err := c.CallJSON(ctx, Call{RunID: "bench", Server: "alpha", Tool: "big", Args: args}); err != nil || len(js) < n {
					b.Error(len(js), err)
				}
			})
		}
		wg.Wait()
		close(stop)
		<-sampled
	}
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(peak.Load())/float64(n*parallel), "peak-heap/in-flight")
}
