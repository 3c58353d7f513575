package policy

import (
	"time"

	"go.yaml.in/yaml/v3"
)

var poolKeys = []string{"size", "max", "shrink_after", "max_age"}

// Pool is the warm pool: containers started ahead of time, each waiting
// for one run, so that a run does not wait for a container to start.
type Pool struct {
	// Size is how many ready containers the bridge keeps when idle; 0
	// turns the pool off. 2 (0 to 32).
	Size int
	// Max is how many ready containers the pool grows to while runs take
	// them faster than it refills; at least Size. When not given, 8, or
	// Size when that is larger (0 to 32). Not used when Size is 0.
	Max int
	// ShrinkAfter is how long the pool waits, once the demand fell, to
	// remove the ready containers beyond Size that no run needed; 1m (1s
	// to 1h).
	ShrinkAfter time.Duration
	// MaxAge is how long a ready container waits before it is replaced
	// by a fresh one; 10m (1m to 24h).
	MaxAge time.Duration
}

// Bounds of the pool keys.
const (
	maxPoolSize       = 32
	defaultPoolMax    = 8
	minPoolShrink     = time.Second
	maxPoolShrink     = time.Hour
	minPoolMaxAge     = time.Minute
	maxPoolMaxAge     = 24 * time.Hour
	defaultPoolSize   = 2
	defaultPoolAge    = 10 * time.Minute
	defaultPoolShrink = time.Minute
)

func defaultPool() Pool {
	return Pool{Size: defaultPoolSize, Max: max(defaultPoolSize, defaultPoolMax), ShrinkAfter: defaultPoolShrink, MaxAge: defaultPoolAge}
}

// pool reads the pool section.
func (p *parser) pool(k, v *yaml.Node, pl *Pool) {
	var maxNode *yaml.Node
	ok := p.keys(k, v, "pool", poolKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "size":
			pl.Size = int(p.integer(k, v, name, int64(pl.Size), 0, maxPoolSize))
		case "max":
			pl.Max = int(p.integer(k, v, name, int64(pl.Max), 0, maxPoolSize))
			maxNode = v
		case "shrink_after":
			pl.ShrinkAfter = p.durationIn(k, v, name, pl.ShrinkAfter, minPoolShrink, maxPoolShrink)
		case "max_age":
			pl.MaxAge = p.durationIn(k, v, name, pl.MaxAge, minPoolMaxAge, maxPoolMaxAge)
		}
	})
	if !ok {
		return
	}
	switch {
	case maxNode == nil:
		pl.Max = max(pl.Size, defaultPoolMax)
	case pl.Max < pl.Size:
		p.errorf(maxNode, "pool.max: %d is less than pool.size (%d): max is the most ready containers the pool grows to under load, at least its size", pl.Max, pl.Size)
	}
}
