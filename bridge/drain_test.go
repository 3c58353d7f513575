package bridge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/sandbox"
)

// Draining lets the run in flight finish and answer, refuses a new call
// with a JSON-RPC error that says to reconnect, and says when nothing is
// left in flight.
func TestDrainLetsRunsFinish(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s := newServer(t, Options{Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		close(started)
		select {
		case <-release:
			return sandbox.Result{Status: sandbox.StatusOK, Stdout: "finished\n"}, nil
		case <-ctx.Done():
			return sandbox.Result{Status: sandbox.StatusCancelled}, nil
		}
	})})
	cs := connect(t, s, nil)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}})
		done <- res
	}()
	<-started
	idle := s.Drain()
	select {
	case <-idle:
		t.Fatal("drained with a run in flight")
	case <-time.After(50 * time.Millisecond):
	}
	if n := s.InFlight(); n == 0 {
		t.Fatal("InFlight is 0 with a run in flight")
	}

	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "y"}})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != CodeDraining || !strings.Contains(je.Message, "Reconnect") {
		t.Fatalf("a new call while draining: %v; want a JSON-RPC error %d saying to reconnect", err, CodeDraining)
	}

	close(release)
	if res := <-done; res == nil || res.IsError || !strings.Contains(text(res), "finished") {
		t.Fatalf("the run in flight at the drain: %+v", res)
	}
	select {
	case <-idle:
	case <-time.After(2 * time.Second):
		t.Fatalf("not drained after the last run ended (%d in flight)", s.InFlight())
	}
	// Again: at once.
	select {
	case <-s.Drain():
	default:
		t.Fatal("a second Drain with nothing in flight did not say so at once")
	}
}

// A bridge with nothing in flight is drained at once.
func TestDrainIdle(t *testing.T) {
	s := newServer(t, Options{Instances: withRunner(func(context.Context, sandbox.Request) (sandbox.Result, error) {
		return sandbox.Result{Status: sandbox.StatusOK}, nil
	})})
	cs := connect(t, s, nil)
	call(t, cs, map[string]any{"code": "x"})
	select {
	case <-s.Drain():
	case <-time.After(time.Second):
		t.Fatalf("an idle bridge did not drain (%d in flight)", s.InFlight())
	}
}
