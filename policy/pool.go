package policy

import (
	"time"

	"go.yaml.in/yaml/v3"
)

var poolKeys = []string{"size", "max_age"}

// Pool is the warm pool: containers started ahead of time, each waiting
// for one run, so that a run does not wait for a container to start.
type Pool struct {
	// Size is how many ready containers the bridge keeps; 0 turns the
	// pool off. 2 (0 to 32).
	Size int
	// MaxAge is how long a ready container waits before it is replaced
	// by a fresh one; 10m (1m to 24h).
	MaxAge time.Duration
}

// Bounds of the pool keys.
const (
	maxPoolSize   = 32
	minPoolMaxAge = time.Minute
	maxPoolMaxAge = 24 * time.Hour
)

func defaultPool() Pool { return Pool{Size: 2, MaxAge: 10 * time.Minute} }

// pool reads the pool section.
func (p *parser) pool(k, v *yaml.Node, pl *Pool) {
	p.keys(k, v, "pool", poolKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "size":
			pl.Size = int(p.integer(k, v, name, int64(pl.Size), 0, maxPoolSize))
		case "max_age":
			pl.MaxAge = p.durationIn(k, v, name, pl.MaxAge, minPoolMaxAge, maxPoolMaxAge)
		}
	})
}
