package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A call made in the handler of a 2026-07-28 request (as a run of bridge
// serve --http makes its code's calls) reaches a streamable HTTP upstream
// without the agent's Mcp-Protocol-Version: the upstream, a stateful
// go-sdk server, speaks only older revisions.
func TestUpstreamGetsNoAgentVersion(t *testing.T) {
	if got := reflect.TypeOf(mcp.Implementation{}).PkgPath(); got != sdkPackage {
		t.Fatalf("the go-sdk's package is %q, sdkPackage says %q", got, sdkPackage)
	}
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echoed"}}}, nil, nil
	})
	var mu sync.Mutex
	var versions []string
	upHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			versions = append(versions, r.Header.Get("Mcp-Method")+" "+r.Header.Get("Mcp-Protocol-Version"))
			mu.Unlock()
		}
		upHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(upstream.Close)
	_, c, _ := startProxy(t, Options{ConnectTimeout: 5 * time.Second}, ServerConfig{Name: "up", Type: TypeHTTP, URL: upstream.URL})

	// The agent's side: a stateless server, as bridge serve --http's
	// 2026-07-28 handler, whose tool calls the upstream with its context.
	agentSide := mcp.NewServer(&mcp.Implementation{Name: "agent-side", Version: "1"}, nil)
	mcp.AddTool(agentSide, &mcp.Tool{Name: "relay"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		js, err := c.CallJSON(ctx, Call{RunID: "r", Server: "up", Tool: "echo", Args: json.RawMessage(`{}`)})
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(js)}}}, nil, nil
	})
	agent := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return agentSide },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(agent.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: agent.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the agent negotiated %q, want 2026-07-28", v)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "relay", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("relay: %v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range versions {
		if v == "tools/call 2026-07-28" {
			t.Errorf("the upstream's call carried the agent's version: %q", versions)
		}
	}
}
