// Package bridge is the MCP server an agent talks to: one tool, run_python,
// whose calls run in the sandbox. It owns the tool's definition, the limits
// on concurrent runs, progress and cancellation, and how a run's result is
// rendered for the agent.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/sandbox"
)

// Runner runs one request in the sandbox. *sandbox.Executor is the real
// one; unit tests use a fake.
type Runner interface {
	Run(ctx context.Context, req sandbox.Request) (sandbox.Result, error)
}

// RunnerFactory makes the Runner on first use, so that the server answers
// initialize at once even when no engine is reachable; a failure is
// reported to the call that needed it and tried again on the next call.
type RunnerFactory func(ctx context.Context) (Runner, error)

// Options configure a Server.
type Options struct {
	// NewRunner makes the Runner on first use.
	NewRunner RunnerFactory
	// Limits are the limits of each run. Limits.Timeout is the default
	// timeout, used when a call gives none.
	Limits sandbox.Limits
	// MaxTimeout is the largest timeout_seconds a call may ask for.
	MaxTimeout time.Duration
	// MaxConcurrent runs at once (default 4); QueueLength more wait for a
	// slot (default 16); a call beyond that gets a busy error at once.
	MaxConcurrent int
	QueueLength   int
	// ProgressInterval is the least time between two progress
	// notifications of one call (default 1 s).
	ProgressInterval time.Duration
	Version          string
	Logger           zerolog.Logger
}

// Server is the bridge's MCP server. It is safe for concurrent use.
type Server struct {
	opts  Options
	mcp   *mcp.Server
	log   zerolog.Logger
	slots chan struct{} // a token per run allowed at once
	queue chan struct{} // a token per call allowed to wait or run

	mu     sync.Mutex
	runner Runner
	// runs holds the cancel functions of the calls in flight, so Shutdown
	// can stop them.
	runs   map[*struct{}]context.CancelFunc
	closed bool
	wg     sync.WaitGroup
}

// ErrBusy is returned to a call when every slot and queue place is taken.
var ErrBusy = errors.New("bridge is busy")

// New returns a Server with the run_python tool registered.
func New(opts Options) (*Server, error) {
	if opts.NewRunner == nil {
		return nil, errors.New("bridge: no runner factory")
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if opts.MaxTimeout == 0 {
		opts.MaxTimeout = 5 * time.Minute
	}
	if opts.MaxTimeout < opts.Limits.Timeout {
		return nil, fmt.Errorf("bridge: the default timeout %s is above the maximum %s", opts.Limits.Timeout, opts.MaxTimeout)
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 4
	}
	if opts.QueueLength < 0 {
		return nil, errors.New("bridge: queue length must not be negative")
	}
	if opts.QueueLength == 0 {
		opts.QueueLength = 16
	}
	if opts.ProgressInterval == 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		slots: make(chan struct{}, opts.MaxConcurrent),
		queue: make(chan struct{}, opts.MaxConcurrent+opts.QueueLength),
		runs:  map[*struct{}]context.CancelFunc{},
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "bridge", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	s.mcp.AddTool(runPythonTool(opts.MaxTimeout), s.handleRunPython)
	return s, nil
}

// MCP returns the MCP server to serve over a transport.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// runner returns the Runner, making it on first use.
func (s *Server) getRunner(ctx context.Context) (Runner, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runner != nil {
		return s.runner, nil
	}
	r, err := s.opts.NewRunner(ctx)
	if err != nil {
		return nil, err
	}
	s.runner = r
	return r, nil
}

// track registers a call in flight; the returned func unregisters it. It
// fails once Shutdown has begun.
func (s *Server) track(cancel context.CancelFunc) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the bridge is shutting down")
	}
	key := new(struct{})
	s.runs[key] = cancel
	s.wg.Add(1)
	return func() {
		s.mu.Lock()
		delete(s.runs, key)
		s.mu.Unlock()
		s.wg.Done()
	}, nil
}

// Shutdown refuses new calls, cancels those in flight, and waits until their
// containers are removed or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, cancel := range s.runs {
		cancel()
	}
	n := len(s.runs)
	s.mu.Unlock()
	if n > 0 {
		s.log.Info().Int("runs", n).Msg("cancelling runs in flight")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runs still in flight at shutdown: %w", ctx.Err())
	}
}
