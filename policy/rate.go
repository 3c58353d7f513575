package policy

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxBuckets bounds the buckets one [Limiter] holds.
const maxBuckets = 10000

// Limiter holds the token buckets of one policy's Rates; safe for
// concurrent use.
//
// A bucket is made the first time a call needs it: one per rate and
// server for a rate per "server", one per rate, server and tool for a rate
// per "tool" (or Per unset). It starts full, with Burst tokens (Burst <= 0:
// max(1, ceil(PerSecond))), and refills continuously at PerSecond tokens a
// second up to Burst: a golang.org/x/time/rate [Limiter]. A rate whose
// PerSecond is not positive (Parse rejects those) never refills.
//
// Memory is bounded: a [Limiter] holds at most 10,000 buckets. To make room
// for a new one it forgets the least recently used bucket that is full
// (looking at the 256 least recently used), which loses nothing: a bucket
// made again starts full. Only if none of those is full does it forget the
// least recently used one anyway, whose calls then start again with a full
// bucket; that takes 10,000 keys in use within one refill. Callers should
// take tokens only for calls to tools that exist, so that the keys are
// bounded by the upstreams' tools, not by the names the code makes up.
type Limiter struct {
	now   func() time.Time
	rates []Rate
	lims  []rateLimit // per rate, what Take needs of it

	mu      sync.Mutex
	buckets map[bucketKey]*bucket
	lru     bucket // sentinel of the list of buckets, most recently used first
	max     int    // maxBuckets; tests lower it
	scan    int    // evictScan; tests lower it
	seq     uint64 // counts calls of Take
}

type rateLimit struct {
	perServer bool
	limit     rate.Limit
	burst     int
}

type bucketKey struct {
	rate         int
	server, tool string // tool is "" for a rate per server
}

type bucket struct {
	key        bucketKey
	tokens     *rate.Limiter
	seq        uint64 // the Take that last used it
	prev, next *bucket
}

// NewLimiter returns a [Limiter] for rates (copied), reading the time from
// now (nil: time.Now).
func NewLimiter(rates []Rate, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	l := &Limiter{
		now:     now,
		rates:   append([]Rate(nil), rates...),
		lims:    make([]rateLimit, len(rates)),
		buckets: map[bucketKey]*bucket{},
		max:     maxBuckets,
		scan:    evictScan,
	}
	l.lru.next, l.lru.prev = &l.lru, &l.lru
	for i := range l.rates {
		r := &l.rates[i]
		lim := rate.Limit(r.PerSecond)
		if !(r.PerSecond > 0) {
			lim = 0
		} else if math.IsInf(r.PerSecond, 1) {
			lim = rate.Inf
		}
		l.lims[i] = rateLimit{perServer: r.Per == "server", limit: lim, burst: burstOf(r)}
	}
	return l
}

// burstOf is r's bucket size: Burst, or when that is not positive one
// second's worth, at least 1.
func burstOf(r *Rate) int {
	if r.Burst > 0 {
		return r.Burst
	}
	if r.PerSecond > 1 && !math.IsInf(r.PerSecond, 0) {
		return int(math.Min(math.Ceil(r.PerSecond), math.MaxInt32))
	}
	return 1
}

// Take takes one token from every bucket that applies to (server, tool):
// those of every rate whose server and tool globs match. If any of them is
// empty it takes none and returns the first empty rate (a pointer into the
// [Limiter]'s copy of the rates, which Describe and RateName name) and how
// long until that bucket has a token again; another empty rate may still
// refuse a call made then. A rate that never refills reports
// math.MaxInt64 (about 292 years).
func (l *Limiter) Take(server, tool string) (ok bool, limited *Rate, retryAfter time.Duration) {
	if l == nil || len(l.rates) == 0 {
		return true, nil, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	var buf [4]*rate.Reservation
	taken := buf[:0]
	for i := range l.rates {
		r := &l.rates[i]
		if !glob(r.Server, server) || !glob(r.Tool, tool) {
			continue
		}
		lim := &l.lims[i]
		key := bucketKey{rate: i, server: server}
		if !lim.perServer {
			key.tool = tool
		}
		b := l.bucket(key, lim, now)
		res := b.tokens.ReserveN(now, 1)
		if d := res.DelayFrom(now); !res.OK() || d > 0 {
			res.CancelAt(now)
			for _, t := range taken {
				t.CancelAt(now)
			}
			if !res.OK() || d == rate.InfDuration {
				d = math.MaxInt64
			}
			return false, r, d
		}
		taken = append(taken, res)
	}
	return true, nil, 0
}

// bucket returns key's bucket, made if need be, and marks it the most
// recently used. Called with mu held.
func (l *Limiter) bucket(key bucketKey, lim *rateLimit, now time.Time) *bucket {
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.max {
			l.evict(now)
		}
		b = &bucket{key: key, tokens: rate.NewLimiter(lim.limit, lim.burst)}
		l.buckets[key] = b
	} else {
		b.prev.next, b.next.prev = b.next, b.prev // unlink
	}
	b.seq = l.seq
	b.prev, b.next = &l.lru, l.lru.next
	l.lru.next.prev = b
	l.lru.next = b
	return b
}

// evictScan bounds the buckets evict looks at for a full one, and so the
// time a call that needs a new bucket holds the lock.
const evictScan = 256

// evict forgets one bucket to make room for another: the least recently
// used full one among the l.scan (evictScan) least recently used, else the least
// recently used. Buckets the current Take uses are kept. Called with mu
// held.
func (l *Limiter) evict(now time.Time) {
	var victim *bucket
	n := 0
	for b := l.lru.prev; b != &l.lru && n < l.scan; b = b.prev {
		if b.seq == l.seq {
			continue
		}
		n++
		if b.tokens.TokensAt(now) >= float64(l.lims[b.key.rate].burst) {
			victim = b
			break
		}
		if victim == nil {
			victim = b
		}
	}
	if victim == nil {
		return // every bucket is in use by this Take: a few over the bound
	}
	victim.prev.next, victim.next.prev = victim.next, victim.prev
	victim.prev, victim.next = nil, nil
	delete(l.buckets, victim.key)
}

// Len is how many buckets l holds.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// Index is the index in the [Limiter]'s rates (those NewLimiter was given)
// of r, a rate Take returned; -1 if r is not one of them.
func (l *Limiter) Index(r *Rate) int {
	for i := range l.rates {
		if &l.rates[i] == r {
			return i
		}
	}
	return -1
}

// RateName names r, a rate Take returned, for logs and audit:
// "budgets.rates[0] (line 30)" ("budgets.rates[0]" for a rate not read
// from a file).
func (l *Limiter) RateName(r *Rate) string {
	return rateName(r, l.Index(r))
}

// Describe is DescribeRate for r, a rate Take returned.
func (l *Limiter) Describe(r *Rate, server, tool string) string {
	return DescribeRate(r, l.Index(r), server, tool)
}

func rateName(r *Rate, index int) string {
	name := "budgets.rates[" + strconv.Itoa(index) + "]"
	if r.Line > 0 {
		name += " (line " + strconv.Itoa(r.Line) + ")"
	}
	return name
}

// DescribeRate names r, budgets.rates[index], for the error a call it
// refused gets: `rate limit budgets.rates[0] (line 30): 10/s per tool for
// server "x" tool "y"` (a rate per server: `... 600/m per server for server
// "x"`). The rate is written as Format writes it (FormatRate).
func DescribeRate(r *Rate, index int, server, tool string) string {
	s := fmt.Sprintf("rate limit %s: %s ", rateName(r, index), FormatRate(r.PerSecond))
	if r.Per == "server" {
		return s + fmt.Sprintf("per server for server %q", server)
	}
	return s + fmt.Sprintf("per tool for server %q tool %q", server, tool)
}
