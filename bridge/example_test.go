package bridge_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/sandbox"
)

// shoutingEngine is an engine for the example: its sandboxes "run" code by
// printing it in capitals. A real bridge gets its instances from a
// *sandbox.Engine: a container started for the run, or a warm one.
type shoutingEngine struct{}

func (shoutingEngine) Acquire(_ context.Context, _ sandbox.Limits, runID string) (sandbox.Instance, error) {
	return &shouting{}, nil
}

type shouting struct{ closed bool }

func (s *shouting) Exec(_ context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	return sandbox.Result{RunID: x.RunID, Status: sandbox.StatusOK, Stdout: strings.ToUpper(x.Code) + "\n"}, nil
}
func (s *shouting) Kept() bool                  { return false }
func (s *shouting) Closed() bool                { return s.closed }
func (s *shouting) Close(context.Context) error { s.closed = true; return nil }

// The bridge is an MCP server with one tool, run_python; each call's code
// runs in an Instance its Instances gives it, and the agent gets the
// output.
func ExampleServer() {
	limits := sandbox.DefaultLimits()
	srv, err := bridge.New(bridge.Options{Instances: shoutingEngine{}, Limits: limits, Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		fmt.Println(err)
		return
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: bridge.ToolName, Arguments: map[string]any{"code": "print('hello')"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// PRINT('HELLO')
}
