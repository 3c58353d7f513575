package policy

import (
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Budgets bound the code's tool calls.
type Budgets struct {
	MaxCallsPerRun   int           // tool calls one run may make; 0 = no limit; default 1000
	MaxArgumentBytes int64         // one call's arguments as JSON; default 1Mi
	MaxResultBytes   int64         // one call's result as JSON; default 8Mi
	CallTimeout      time.Duration // one call; default 60s
	Rates            []Rate
}

// Rate is a token bucket for the calls that match Server and Tool, shared
// by every run. Every matching [Rate] applies: a call needs a token from each.
type Rate struct {
	Server string // glob; default "*"
	Tool   string // glob; default "*"
	// Per says what shares one bucket: "server" (one bucket per matching
	// server) or "tool" (one per matching server and tool). Default "tool".
	Per string
	// PerSecond is the refill rate, written "10/s", "600/m" or "3600/h".
	PerSecond float64
	// Burst is the bucket's size; default: one second's worth, at least 1.
	Burst int

	Line, Column int
}

var budgetsKeys = []string{"max_calls_per_run", "max_argument_bytes", "max_result_bytes", "call_timeout", "rates"}
var rateKeys = []string{"server", "tool", "per", "rate", "burst"}

// Bounds of the budgets section's values.
const (
	maxArgumentBytes = 4 << 20
	maxResultBytes   = 8 << 20
	maxCallsPerRun   = 1_000_000_000
	maxPerSecond     = 1e9
	maxBurst         = 1_000_000_000
)

func (p *parser) budgets(k, v *yaml.Node, b *Budgets) {
	p.keys(k, v, "budgets", budgetsKeys, func(key, name string, k, v *yaml.Node) {
		p.budgetsKey(key, name, k, v, b)
	})
}

// budgetsKey reads the value v of budgets.key into b; name is what errors
// call it.
func (p *parser) budgetsKey(key, name string, k, v *yaml.Node, b *Budgets) {
	switch key {
	case "max_calls_per_run":
		b.MaxCallsPerRun = int(p.integer(k, v, name, int64(b.MaxCallsPerRun), 0, maxCallsPerRun))
	case "max_argument_bytes":
		b.MaxArgumentBytes = p.size(k, v, name, b.MaxArgumentBytes, 1, maxArgumentBytes)
	case "max_result_bytes":
		b.MaxResultBytes = p.size(k, v, name, b.MaxResultBytes, 1, maxResultBytes)
	case "call_timeout":
		b.CallTimeout, _ = p.duration(k, v, name, b.CallTimeout)
	case "rates":
		p.items(k, v, name, "a list of rates", func(item *yaml.Node, name string) {
			if r, ok := p.rate(item, name); ok {
				b.Rates = append(b.Rates, r)
			}
		})
	}
}

func (p *parser) rate(n *yaml.Node, name string) (Rate, bool) {
	r := Rate{Server: "*", Tool: "*", Per: "tool", Line: n.Line, Column: n.Column}
	seen, ok := p.entry(n, name, "a rate (a mapping with rate and optionally server, tool, per, burst)", rateKeys, func(key, kname string, k, v *yaml.Node) {
		switch key {
		case "server":
			r.Server, _ = p.glob(k, v, kname)
		case "tool":
			r.Tool, _ = p.glob(k, v, kname)
		case "per":
			if s, ok := p.enum(k, v, kname, []string{"tool", "server"}); ok {
				r.Per = s
			}
		case "rate":
			r.PerSecond = p.rateValue(k, v, kname)
		case "burst":
			r.Burst = int(p.integer(k, v, kname, 0, 1, maxBurst))
		}
	})
	if !ok {
		return r, false
	}
	if seen["rate"] == nil {
		p.errorf(n, "%s: missing rate: say how many calls, e.g. rate: 10/s", name)
	}
	if r.Burst == 0 {
		r.Burst = max(1, int(math.Ceil(r.PerSecond)))
	}
	return r, true
}

// rateValue reads "N/s", "N/m" or "N/h" as calls per second.
func (p *parser) rateValue(k, v *yaml.Node, name string) float64 {
	const want = "a rate such as 10/s, 600/m or 3600/h"
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		if v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
			p.errorf(v, "%s: want %s, got a number %s: add a unit, e.g. %s/s", name, want, v.Value, v.Value)
		} else {
			p.wrong(k, v, name, want)
		}
		return 0
	}
	m := rateRE.FindStringSubmatch(v.Value)
	if m == nil {
		p.errorf(v, "%s: invalid rate %q: want N/s, N/m or N/h with N a positive number, e.g. 10/s", name, v.Value)
		return 0
	}
	n, err := strconv.ParseFloat(m[1], 64)
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[m[2]]
	r := n / per
	if err != nil || r <= 0 || r > maxPerSecond || math.IsInf(r, 0) {
		p.errorf(v, "%s: %s is out of range: it must be more than 0 and at most %s/s", name, v.Value, formatFloat(maxPerSecond))
		return 0
	}
	return r
}
