package policy

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a fake clock for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// takeN takes n tokens that must all be there.
func takeN(t *testing.T, l *Limiter, server, tool string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if ok, r, d := l.Take(server, tool); !ok {
			t.Fatalf("take %d of %d for %s/%s refused by %+v (retry after %v)", i+1, n, server, tool, r, d)
		}
	}
}

// refused checks that a call is refused by rate index want with retryAfter.
func refused(t *testing.T, l *Limiter, server, tool string, want int, retry time.Duration) {
	t.Helper()
	ok, r, d := l.Take(server, tool)
	if ok {
		t.Fatalf("%s/%s: allowed, want refused by rates[%d]", server, tool, want)
	}
	if got := l.Index(r); got != want {
		t.Fatalf("%s/%s: refused by rates[%d], want rates[%d]", server, tool, got, want)
	}
	if d != retry {
		t.Fatalf("%s/%s: retry after %v, want %v", server, tool, d, retry)
	}
}

func TestLimiterBurstAndRefill(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{{Server: "*", Tool: "*", Per: "tool", PerSecond: 10, Burst: 20}}, c.now)
	takeN(t, l, "s", "t", 20)
	refused(t, l, "s", "t", 0, 100*time.Millisecond)

	c.add(50 * time.Millisecond) // half a token
	refused(t, l, "s", "t", 0, 50*time.Millisecond)
	c.add(50 * time.Millisecond)
	takeN(t, l, "s", "t", 1)
	refused(t, l, "s", "t", 0, 100*time.Millisecond)

	c.add(time.Second) // 10 tokens
	takeN(t, l, "s", "t", 10)
	refused(t, l, "s", "t", 0, 100*time.Millisecond)

	c.add(time.Hour) // refills up to the burst only
	takeN(t, l, "s", "t", 20)
	refused(t, l, "s", "t", 0, 100*time.Millisecond)

	// A clock that goes back refills nothing and breaks nothing.
	c.add(-time.Minute)
	refused(t, l, "s", "t", 0, 100*time.Millisecond)
	c.add(time.Minute + 100*time.Millisecond)
	takeN(t, l, "s", "t", 1)
}

func TestLimiterDefaultBurst(t *testing.T) {
	for _, tc := range []struct {
		perSecond float64
		burst     int
		want      int
		retry     time.Duration
	}{
		{10, 0, 10, 100 * time.Millisecond},
		{2.5, 0, 3, 400 * time.Millisecond},
		{1.0 / 60, 0, 1, time.Minute},
		{1.0 / 3600, -1, 1, time.Hour},
		{0.5, 4, 4, 2 * time.Second},
	} {
		c := newClock()
		l := NewLimiter([]Rate{{PerSecond: tc.perSecond, Burst: tc.burst}}, c.now)
		takeN(t, l, "s", "t", tc.want)
		ok, _, d := l.Take("s", "t")
		// 1/60 and 1/3600 are not exact in binary: allow a rounding nanosecond.
		if ok || d < tc.retry || d > tc.retry+time.Nanosecond {
			t.Errorf("%v/s burst %d: after %d takes: ok %v retry %v, want refused, retry %v", tc.perSecond, tc.burst, tc.want, ok, d, tc.retry)
		}
		// Waiting retryAfter is always enough.
		c.add(d)
		takeN(t, l, "s", "t", 1)
	}
}

func TestLimiterPerServerAndPerTool(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{
		{Server: "github", Tool: "*", Per: "server", PerSecond: 1, Burst: 3, Line: 30},
		{Server: "fs", Tool: "*", PerSecond: 1, Burst: 2, Line: 34}, // Per unset: per tool
	}, c.now)

	// Per server: the tools of github share one bucket.
	takeN(t, l, "github", "a", 2)
	takeN(t, l, "github", "b", 1)
	refused(t, l, "github", "c", 0, time.Second)

	// Per tool: each tool of fs has its own.
	takeN(t, l, "fs", "read", 2)
	refused(t, l, "fs", "read", 1, time.Second)
	takeN(t, l, "fs", "write", 2)
	refused(t, l, "fs", "write", 1, time.Second)

	// Servers no rate matches are not limited, and get no bucket.
	takeN(t, l, "slack", "post", 100)
	if n := l.Len(); n != 3 {
		t.Errorf("%d buckets, want 3", n)
	}
}

func TestLimiterTwoRates(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{
		{Server: "*", Tool: "*", Per: "server", PerSecond: 1, Burst: 5},       // 5 per server
		{Server: "*", Tool: "write_*", Per: "tool", PerSecond: 0.5, Burst: 2}, // 2 per write tool
	}, c.now)

	takeN(t, l, "fs", "write_file", 2) // both rates: server 3 left, write_file 0 left
	// write_file's bucket is empty: refused, and the server's bucket is not
	// touched.
	for i := 0; i < 10; i++ {
		refused(t, l, "fs", "write_file", 1, 2*time.Second)
	}
	takeN(t, l, "fs", "read_file", 3) // the server's 3 remaining tokens
	refused(t, l, "fs", "read_file", 0, time.Second)
	// Both empty: the first rate is reported.
	refused(t, l, "fs", "write_file", 0, time.Second)

	// After 2s: server has 2 tokens, write_file 1.
	c.add(2 * time.Second)
	takeN(t, l, "fs", "write_file", 1)
	refused(t, l, "fs", "write_file", 1, 2*time.Second)
	takeN(t, l, "fs", "read_file", 1) // write_file's refusal took none of the server's
	refused(t, l, "fs", "read_file", 0, time.Second)
}

func TestLimiterNoRates(t *testing.T) {
	for _, l := range []*Limiter{nil, NewLimiter(nil, nil)} {
		if ok, r, d := l.Take("s", "t"); !ok || r != nil || d != 0 {
			t.Errorf("Take = %v %v %v, want true nil 0", ok, r, d)
		}
	}
}

func TestLimiterNeverRefills(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{{PerSecond: 0, Burst: 2}}, c.now)
	takeN(t, l, "s", "t", 2)
	c.add(24 * time.Hour)
	refused(t, l, "s", "t", 0, math.MaxInt64)
}

func TestLimiterCopiesRates(t *testing.T) {
	rates := []Rate{{PerSecond: 1, Burst: 1}}
	l := NewLimiter(rates, newClock().now)
	rates[0].Burst = 100
	takeN(t, l, "s", "t", 1)
	if ok, _, _ := l.Take("s", "t"); ok {
		t.Error("a change to the caller's rates changed the limiter")
	}
}

func TestDescribeRate(t *testing.T) {
	for _, tc := range []struct {
		r     Rate
		index int
		want  string
	}{
		{Rate{Per: "tool", PerSecond: 10, Line: 30}, 0, `rate limit budgets.rates[0] (line 30): 10/s per tool for server "x" tool "y"`},
		{Rate{PerSecond: 2.5}, 1, `rate limit budgets.rates[1]: ` + FormatRate(2.5) + ` per tool for server "x" tool "y"`},
		{Rate{Per: "server", PerSecond: 0.5, Line: 7}, 2, `rate limit budgets.rates[2] (line 7): ` + FormatRate(0.5) + ` per server for server "x"`},
		{Rate{Per: "server", PerSecond: 1.0 / 60}, 3, `rate limit budgets.rates[3]: 1/m per server for server "x"`},
		{Rate{PerSecond: 1.0 / 3600}, 4, `rate limit budgets.rates[4]: 1/h per tool for server "x" tool "y"`},
	} {
		if got := DescribeRate(&tc.r, tc.index, "x", "y"); got != tc.want {
			t.Errorf("DescribeRate(%+v) =\n  %s\nwant\n  %s", tc.r, got, tc.want)
		}
	}

	l := NewLimiter([]Rate{{Server: "a", PerSecond: 1, Burst: 1, Line: 3}, {Server: "b", Per: "server", PerSecond: 1, Burst: 1, Line: 9}}, newClock().now)
	takeN(t, l, "b", "t", 1)
	_, r, _ := l.Take("b", "t")
	if got, want := l.Describe(r, "b", "t"), `rate limit budgets.rates[1] (line 9): 1/s per server for server "b"`; got != want {
		t.Errorf("Describe = %s, want %s", got, want)
	}
	if got, want := l.RateName(r), "budgets.rates[1] (line 9)"; got != want {
		t.Errorf("RateName = %s, want %s", got, want)
	}
	if l.Index(&Rate{}) != -1 {
		t.Error("Index of a foreign rate is not -1")
	}
}

func TestLimiterConcurrent(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{
		{Per: "server", PerSecond: 1, Burst: 500},
		{Tool: "t?", PerSecond: 1, Burst: 100},
	}, c.now)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if ok, _, _ := l.Take("s", fmt.Sprintf("t%d", i%4)); ok {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// 4 tools with 100 each, under a server budget of 500: exactly 400.
	if n := allowed.Load(); n != 400 {
		t.Errorf("%d calls allowed, want 400", n)
	}
}

func TestLimiterEviction(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{{PerSecond: 1, Burst: 2}}, c.now)
	if l.max != 10000 {
		t.Fatalf("bound %d, want 10000", l.max)
	}
	l.max = 3

	takeN(t, l, "s", "a", 2) // a: empty
	takeN(t, l, "s", "b", 1) // b: 1 left
	c.add(time.Second)       // a: 1, b: 2 (full)
	takeN(t, l, "s", "c", 1)
	if n := l.Len(); n != 3 {
		t.Fatalf("%d buckets, want 3", n)
	}
	takeN(t, l, "s", "d", 1) // a (1), b (full), c (1), and d would be 4
	if n := l.Len(); n != 3 {
		t.Fatalf("%d buckets, want 3", n)
	}
	// b was the only full one, so it went although a is older; a kept its state.
	l.mu.Lock()
	_, hasA := l.buckets[bucketKey{server: "s", tool: "a"}]
	_, hasB := l.buckets[bucketKey{server: "s", tool: "b"}]
	l.mu.Unlock()
	if !hasA || hasB {
		t.Fatalf("a kept %v (want true), b kept %v (want false)", hasA, hasB)
	}
	takeN(t, l, "s", "a", 1)
	refused(t, l, "s", "a", 0, time.Second)

	// No bucket full: the least recently used goes anyway, and the bound
	// holds.
	takeN(t, l, "s", "c", 1)
	takeN(t, l, "s", "d", 1) // a, c, d all hold less than 2; LRU order a, c, d
	takeN(t, l, "s", "e", 1)
	if n := l.Len(); n != 3 {
		t.Fatalf("%d buckets, want 3", n)
	}
	l.mu.Lock()
	_, hasA = l.buckets[bucketKey{server: "s", tool: "a"}]
	l.mu.Unlock()
	if hasA {
		t.Fatal("the least recently used bucket was kept")
	}

	// Many keys: the bound holds.
	for i := 0; i < 100; i++ {
		takeN(t, l, "s", fmt.Sprint("k", i), 1)
	}
	if n := l.Len(); n != 3 {
		t.Fatalf("%d buckets, want 3", n)
	}
}

func TestLimiterEvictionScanIsBounded(t *testing.T) {
	c := newClock()
	l := NewLimiter([]Rate{{Tool: "full*", PerSecond: 1, Burst: 1}, {Tool: "slow*", PerSecond: 1e-3, Burst: 2}}, c.now)
	if l.scan != 256 {
		t.Fatalf("scan %d, want 256", l.scan)
	}
	l.max, l.scan = 4, 2
	takeN(t, l, "s", "full1", 1)
	c.add(time.Second) // full1 is full again
	takeN(t, l, "s", "slow1", 1)
	takeN(t, l, "s", "slow2", 1)
	takeN(t, l, "s", "slow3", 1)
	// LRU order, oldest first: full1 (full), slow1, slow2, slow3.
	takeN(t, l, "s", "slow4", 1) // full1 is within the 2 scanned: it goes
	has := func(tool string) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		_, ok := l.buckets[bucketKey{rate: 0, server: "s", tool: tool}]
		if !ok {
			_, ok = l.buckets[bucketKey{rate: 1, server: "s", tool: tool}]
		}
		return ok
	}
	if has("full1") || !has("slow1") {
		t.Fatal("full1 kept or slow1 evicted")
	}
	// Now oldest first: slow1, slow2, slow3, slow4, none full; a full
	// bucket made and left at the front is beyond the scan.
	takeN(t, l, "s", "full2", 1) // evicts slow1 (LRU, none full)
	c.add(time.Second)           // full2 full again
	if has("slow1") || !has("full2") {
		t.Fatal("slow1 kept or full2 evicted")
	}
	takeN(t, l, "s", "slow5", 1) // scans slow2, slow3: neither full, so slow2 goes, not full2
	if has("slow2") || !has("full2") {
		t.Fatal("the scan was not bounded")
	}
}

func TestLimiterEvictionKeepsCurrentTake(t *testing.T) {
	// Two rates apply to a call; with room for one bucket the second must
	// not evict the first, which the call is using.
	c := newClock()
	l := NewLimiter([]Rate{{PerSecond: 1, Burst: 1}, {Per: "server", PerSecond: 1, Burst: 1}}, c.now)
	l.max = 1
	takeN(t, l, "s", "t", 1)
	if n := l.Len(); n != 2 {
		t.Fatalf("%d buckets, want 2 (over the bound by the one call)", n)
	}
	refused(t, l, "s", "t", 0, time.Second)
}

func BenchmarkTake(b *testing.B) {
	l := NewLimiter([]Rate{
		{Server: "*", Tool: "*", Per: "server", PerSecond: 1e9, Burst: 1e9},
		{Server: "git*", Tool: "write_*", PerSecond: 1e9, Burst: 1e9},
		{Server: "fs", Tool: "*", PerSecond: 1e9, Burst: 1e9},
	}, nil)
	b.ReportAllocs()
	for b.Loop() {
		if ok, _, _ := l.Take("github", "write_file"); !ok {
			b.Fatal("refused")
		}
	}
}

func BenchmarkTakeParallel(b *testing.B) {
	l := NewLimiter([]Rate{{Server: "*", Tool: "*", PerSecond: 1e9, Burst: 1e9}}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Take("github", "write_file")
		}
	})
}

// BenchmarkTakeEvict is the worst case: every call needs a new bucket and
// none of the 10,000 is full, so each call scans them all.
func BenchmarkTakeEvict(b *testing.B) {
	c := newClock()
	l := NewLimiter([]Rate{{PerSecond: 1e-6, Burst: 2}}, c.now)
	names := make([]string, 20000)
	for i := range names {
		names[i] = fmt.Sprint("tool", i)
	}
	for i := 0; i < l.max; i++ {
		l.Take("s", names[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Take("s", names[i%len(names)])
		i++
	}
}
