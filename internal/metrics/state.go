package metrics

import "github.com/prometheus/client_golang/prometheus"

// State is where a scrape reads what is not counted as it happens. Each
// func may be nil: its metrics are then not exported (a `bridge proxy` has
// no pool; a bridge with a remote proxy has no upstreams). Each is called
// once per scrape and must be cheap.
type State struct {
	Load      func() Load
	Pool      func() (PoolState, bool) // false: no engine open yet
	Host      func() (HostState, bool)
	Policy    func() PolicyState
	Upstreams func() []UpstreamState
	Artifacts func() ArtifactState
}

// ArtifactState is the artifacts folder's (artifacts.dir).
type ArtifactState struct {
	Bytes                    int64 // held now
	StoredFiles, StoredBytes int64 // kept so far
}

// Load is the bridge's work now.
type Load struct {
	Running, Waiting int // runs in their slots; calls queued for one
	Sessions         int // sessions open
}

// PoolState is the warm pool's, read from its stats.
type PoolState struct {
	Size, Max, Target, Ready, Starting int
	Hits, Misses, Started, Failed      int64
	Discarded, Grown, Shrunk           int64
}

// HostState is the engine's executor's: its containers and what its host
// budgets hold, and how often each cut a run off.
type HostState struct {
	ContainersAlive     int64
	AnswerBytesPending  int64 // answers framed, not yet read by runners
	ResultBytesReserved int64 // reserved by tool calls in flight
	RequestsInFlight    int64
	ProtocolErrors      int64
	// Cut-offs of the host's own budgets, by name (runner_stalled,
	// host_time, answer_bytes_run, answer_bytes_bridge).
	Cutoffs map[string]int64
}

// PolicyState is the policy store's.
type PolicyState struct {
	Generation     int
	ReloadFailures int64
}

// UpstreamState is one configured upstream server's.
type UpstreamState struct {
	Server string
	// Tried says a connect was made: servers start on first use, and one
	// not used yet is neither up nor down (bridge_upstream_up is absent).
	Tried           bool
	Up              bool
	Restarts        int64 // connects after the first
	ConnectFailures int64
}

// Watch registers st to be read at each scrape.
func (m *Metrics) Watch(st State) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&stateCollector{st: st, d: newDescs()})
}

// descs are the descriptions of what a State exports.
type descs struct {
	descRunning    *prometheus.Desc
	descWaiting    *prometheus.Desc
	descSessions   *prometheus.Desc
	descPoolTarget *prometheus.Desc
	descPoolSize   *prometheus.Desc
	descPoolMax    *prometheus.Desc
	descPoolGrown  *prometheus.Desc
	descPoolShrunk *prometheus.Desc
	descPoolReady  *prometheus.Desc
	descPoolStart  *prometheus.Desc
	descPoolHits   *prometheus.Desc
	descPoolMisses *prometheus.Desc
	descPoolStarts *prometheus.Desc
	descPoolFails  *prometheus.Desc
	descPoolDisc   *prometheus.Desc
	descAlive      *prometheus.Desc
	descPending    *prometheus.Desc
	descReserved   *prometheus.Desc
	descRequests   *prometheus.Desc
	descProtocol   *prometheus.Desc
	descCutoffs    *prometheus.Desc
	descGen        *prometheus.Desc
	descReloadFail *prometheus.Desc
	descUp         *prometheus.Desc
	descRestarts   *prometheus.Desc
	descConnFail   *prometheus.Desc
	descArtKept    *prometheus.Desc
	descArtFiles   *prometheus.Desc
	descArtBytes   *prometheus.Desc
}

func newDescs() *descs {
	return &descs{
		descRunning:    desc("bridge_runs_in_flight", "Runs holding a slot (sandbox.max_concurrent)."),
		descWaiting:    desc("bridge_queue_depth", "Calls waiting for a slot (sandbox.queue); more are answered busy."),
		descSessions:   desc("bridge_sessions_open", "Sessions open (each holds a container)."),
		descPoolTarget: desc("bridge_pool_target", "Ready containers the warm pool aims to keep now: pool.size, or more under demand, up to pool.max."),
		descPoolSize:   desc("bridge_pool_size", "pool.size: the ready containers kept when idle."),
		descPoolMax:    desc("bridge_pool_max", "pool.max: the most the pool grows to under demand."),
		descPoolGrown:  desc("bridge_pool_grown_total", "Steps of one the pool's target took up under demand."),
		descPoolShrunk: desc("bridge_pool_shrunk_total", "Steps of one the pool's target took back down when idle."),
		descPoolReady:  desc("bridge_pool_ready", "Containers started ahead and waiting for a run."),
		descPoolStart:  desc("bridge_pool_starting", "Pool containers being started."),
		descPoolHits:   desc("bridge_pool_hits_total", "Runs that took a ready container."),
		descPoolMisses: desc("bridge_pool_misses_total", "Runs that found no ready container of their shape and started cold."),
		descPoolStarts: desc("bridge_pool_started_total", "Containers the pool started."),
		descPoolFails:  desc("bridge_pool_refill_failures_total", "Pool starts that failed."),
		descPoolDisc:   desc("bridge_pool_discarded_total", "Ready containers removed unused (dead, too old, of a shape no longer wanted)."),
		descAlive:      desc("bridge_containers_alive", "Containers this bridge created and has not removed yet: runs, sessions, the pool."),
		descPending:    desc("bridge_host_answer_bytes_pending", "Bytes of answers waiting for runners to read them (bounded per run and for the bridge)."),
		descReserved:   desc("bridge_host_result_bytes_reserved", "Result capacity reserved by tool calls in flight (bounded per run and for the bridge)."),
		descRequests:   desc("bridge_host_requests_in_flight", "Requests of the code (tool calls, queries) being answered."),
		descProtocol:   desc("bridge_relay_protocol_errors_total", "Runs ended for breaking the relay protocol on the socket."),
		descCutoffs:    prometheus.NewDesc("bridge_host_cutoffs_total", "Requests refused or runs cut off by one of the host's own budgets.", []string{"budget"}, nil),
		descGen:        desc("bridge_policy_generation", "Policies in force so far: 1 at start, one more for each reload that took."),
		descReloadFail: desc("bridge_policy_reload_failures_total", "Policy files that failed to load: the policy in force stayed."),
		descUp:         prometheus.NewDesc("bridge_upstream_up", "1 while the upstream server's MCP session is open, 0 when it is not; absent until its first use (servers start on first use).", []string{"server"}, nil),
		descConnFail:   prometheus.NewDesc("bridge_upstream_connect_failures_total", "Connects to the upstream server that failed (it is retried with backoff).", []string{"server"}, nil),
		descRestarts:   prometheus.NewDesc("bridge_upstream_restarts_total", "Connects to the upstream server after its first.", []string{"server"}, nil),
		descArtKept:    desc("bridge_artifacts_kept_bytes", "Bytes the artifacts folder holds now."),
		descArtFiles:   desc("bridge_artifacts_stored_total", "Files the code returned that the bridge kept by reference (artifacts.dir)."),
		descArtBytes:   desc("bridge_artifacts_stored_bytes_total", "Bytes of the files kept by reference."),
	}
}

func desc(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }

// stateCollector exports a State at each scrape: the parts it has.
type stateCollector struct {
	st State
	d  *descs
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.d.descRunning,
		c.d.descWaiting,
		c.d.descSessions,
		c.d.descPoolTarget,
		c.d.descPoolSize,
		c.d.descPoolMax,
		c.d.descPoolGrown,
		c.d.descPoolShrunk,
		c.d.descPoolReady,
		c.d.descPoolStart,
		c.d.descPoolHits,
		c.d.descPoolMisses,
		c.d.descPoolStarts,
		c.d.descPoolFails,
		c.d.descPoolDisc,
		c.d.descAlive,
		c.d.descPending,
		c.d.descReserved,
		c.d.descRequests,
		c.d.descProtocol,
		c.d.descCutoffs,
		c.d.descGen,
		c.d.descReloadFail,
		c.d.descUp,
		c.d.descRestarts,
		c.d.descConnFail,
		c.d.descArtKept,
		c.d.descArtFiles,
		c.d.descArtBytes,
	} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	st := c.st
	if st.Load != nil {
		l := st.Load()
		gauge(c.d.descRunning, float64(l.Running))
		gauge(c.d.descWaiting, float64(l.Waiting))
		gauge(c.d.descSessions, float64(l.Sessions))
	}
	if st.Pool != nil {
		if p, ok := st.Pool(); ok {
			gauge(c.d.descPoolTarget, float64(p.Target))
			gauge(c.d.descPoolSize, float64(p.Size))
			gauge(c.d.descPoolMax, float64(p.Max))
			counter(c.d.descPoolGrown, float64(p.Grown))
			counter(c.d.descPoolShrunk, float64(p.Shrunk))
			gauge(c.d.descPoolReady, float64(p.Ready))
			gauge(c.d.descPoolStart, float64(p.Starting))
			counter(c.d.descPoolHits, float64(p.Hits))
			counter(c.d.descPoolMisses, float64(p.Misses))
			counter(c.d.descPoolStarts, float64(p.Started))
			counter(c.d.descPoolFails, float64(p.Failed))
			counter(c.d.descPoolDisc, float64(p.Discarded))
		}
	}
	if st.Host != nil {
		if h, ok := st.Host(); ok {
			gauge(c.d.descAlive, float64(h.ContainersAlive))
			gauge(c.d.descPending, float64(h.AnswerBytesPending))
			gauge(c.d.descReserved, float64(h.ResultBytesReserved))
			gauge(c.d.descRequests, float64(h.RequestsInFlight))
			counter(c.d.descProtocol, float64(h.ProtocolErrors))
			for name, n := range h.Cutoffs {
				counter(c.d.descCutoffs, float64(n), name)
			}
		}
	}
	if st.Policy != nil {
		p := st.Policy()
		gauge(c.d.descGen, float64(p.Generation))
		counter(c.d.descReloadFail, float64(p.ReloadFailures))
	}
	if st.Upstreams != nil {
		for _, u := range st.Upstreams() {
			up := 0.0
			if u.Up {
				up = 1
			}
			if u.Tried {
				gauge(c.d.descUp, up, u.Server)
			}
			counter(c.d.descRestarts, float64(u.Restarts), u.Server)
			counter(c.d.descConnFail, float64(u.ConnectFailures), u.Server)
		}
	}
	if st.Artifacts != nil {
		a := st.Artifacts()
		gauge(c.d.descArtKept, float64(a.Bytes))
		counter(c.d.descArtFiles, float64(a.StoredFiles))
		counter(c.d.descArtBytes, float64(a.StoredBytes))
	}
}
