package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// hostileMCP is a streamable-HTTP MCP server written by hand, to send what
// the SDK's server never would. For each request with an id, answer may
// write the response and return true; otherwise initialize and tools/list
// get small, ordinary answers and any other method "method not found".
// It counts the bytes it managed to write.
type hostileMCP struct {
	*httptest.Server
	written atomic.Int64
}

func newHostileMCP(t *testing.T, answer func(w io.Writer, h http.Header, method string, id json.RawMessage) bool) *hostileMCP {
	s := &hostileMCP{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil || len(msg.ID) == 0 {
			w.WriteHeader(http.StatusAccepted) // a notification
			return
		}
		cw := &countingWriter{w: w, n: &s.written}
		if answer != nil && answer(cw, w.Header(), msg.Method, msg.ID) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch msg.Method {
		case "initialize":
			fmt.Fprintf(cw, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}}`, msg.ID)
		case "tools/list":
			fmt.Fprintf(cw, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}}`, msg.ID)
		default:
			fmt.Fprintf(cw, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, msg.ID)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// writeHuge writes a JSON-RPC answer to id whose result is
// prefix + n bytes of "x" + suffix, in 1 MiB writes, until the client
// stops reading.
func writeHuge(w io.Writer, id json.RawMessage, prefix string, n int, suffix string) {
	if _, err := fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s`, id, prefix); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("x", 1<<20))
	for ; n > 0; n -= len(chunk) {
		if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
			return
		}
	}
	_, _ = fmt.Fprintf(w, "%s}", suffix)
}

// A streamable-HTTP upstream that answers application/json with 64 MiB is
// cut off at 16 MiB, at initialize and at a tool call, with an error that
// says so.
func TestHTTPUpstreamBodyIsBounded(t *testing.T) {
	huge := func(at string) func(io.Writer, http.Header, string, json.RawMessage) bool {
		return func(w io.Writer, h http.Header, method string, id json.RawMessage) bool {
			if method != at {
				return false
			}
			h.Set("Content-Type", "application/json")
			switch method {
			case "initialize":
				writeHuge(w, id, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"`, 64<<20, `"}}`)
			default:
				writeHuge(w, id, `{"content":[{"type":"text","text":"`, 64<<20, `"}]}`)
			}
			return true
		}
	}
	const want = "the server's answer is larger than 16 MiB, the most the bridge reads in one HTTP response"

	t.Run("initialize", func(t *testing.T) {
		hs := newHostileMCP(t, huge("initialize"))
		p, _, _ := startProxy(t, Options{ConnectTimeout: 20 * time.Second}, ServerConfig{Name: "huge", Type: TypeHTTP, URL: hs.URL})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st := p.Statuses(ctx)[0]
		if st.State != "unavailable" || !strings.Contains(st.Error, want) {
			t.Fatalf("status %+v\nwant unavailable with %q", st, want)
		}
		if n := hs.written.Load(); n > 40<<20 {
			t.Errorf("the server wrote %d MiB: the client read on", n>>20)
		}
	})

	t.Run("tools/call", func(t *testing.T) {
		hs := newHostileMCP(t, huge("tools/call"))
		p, _, _ := startProxy(t, Options{ConnectTimeout: 20 * time.Second}, ServerConfig{Name: "huge", Type: TypeHTTP, URL: hs.URL})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, _, err := p.byName["huge"].call(ctx, "big", map[string]any{}, 20*time.Second, false)
		if err == nil || !strings.Contains(err.Error(), want) {
			var size int
			if res != nil {
				js, _ := json.Marshal(res)
				size = len(js)
			}
			t.Fatalf("call: a %d-byte result, error %v\nwant an error with %q", size, err, want)
		}
		if n := hs.written.Load(); n > 40<<20 {
			t.Errorf("the server wrote %d MiB: the client read on", n>>20)
		}
	})
}

// The bound leaves room: a 12 MiB JSON answer passes, and an event stream
// is bounded per event, not in total (20 MiB of small events, then the
// result).
func TestHTTPUpstreamBodyBoundLeavesRoom(t *testing.T) {
	hs := newHostileMCP(t, func(w io.Writer, h http.Header, method string, id json.RawMessage) bool {
		if method != "tools/call" {
			return false
		}
		h.Set("Content-Type", "text/event-stream")
		ping := ":" + strings.Repeat("p", 1<<10) + "\n\n"
		for range 20 << 10 {
			if _, err := io.WriteString(w, ping); err != nil {
				return true
			}
		}
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", id)
		return true
	})
	big := newHostileMCP(t, func(w io.Writer, h http.Header, method string, id json.RawMessage) bool {
		if method != "tools/call" {
			return false
		}
		h.Set("Content-Type", "application/json")
		writeHuge(w, id, `{"content":[{"type":"text","text":"`, 12<<20, `"}]}`)
		return true
	})
	p, _, _ := startProxy(t, Options{}, ServerConfig{Name: "stream", Type: TypeHTTP, URL: hs.URL},
		ServerConfig{Name: "big", Type: TypeHTTP, URL: big.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, _, err := p.byName["stream"].call(ctx, "big", map[string]any{}, 20*time.Second, false)
	if err != nil || textOf(t, res) != "done" {
		t.Fatalf("20 MiB of events: %v %v", res, err)
	}
	if hs.written.Load() < 20<<20 {
		t.Fatalf("only %d bytes were sent", hs.written.Load())
	}
	res, _, err = p.byName["big"].call(ctx, "big", map[string]any{}, 20*time.Second, false)
	if err != nil || len(textOf(t, res)) != 12<<20 {
		t.Fatalf("a 12 MiB answer: %v", err)
	}
}

// A stdio upstream is bounded by the SDK: one line may have 16 MiB
// (mcp.DefaultMaxLineLength, which CommandTransport always uses). This
// guards that bound, which the bridge relies on and documents.
func TestStdioUpstreamLineIsBounded(t *testing.T) {
	script := `read -r line; printf '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"'; ` +
		`head -c 20000000 /dev/zero | tr '\0' x; printf '"}}}\n'`
	cfg := ServerConfig{Name: "long", Type: TypeStdio, Command: "/bin/sh", Args: []string{"-c", script}}
	p := New(Config{Servers: []ServerConfig{cfg}}, Options{Logger: zerolog.Nop(), ConnectTimeout: 20 * time.Second})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := p.Statuses(ctx)[0]
	if st.State != "unavailable" || !strings.Contains(st.Error, "exceeded the configured maximum line length") {
		t.Fatalf("status %+v", st)
	}
}

// pagingServer is an MCP server over streamable HTTP whose tools/list
// gives page n (from 1) as page(n) and always a nextCursor; it counts the
// pages it served.
func pagingServer(t *testing.T, page func(n int) []*mcp.Tool) (*httptest.Server, *atomic.Int64) {
	var pages atomic.Int64
	s := mcp.NewServer(&mcp.Implementation{Name: "paging"}, nil)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/list" {
				return next(ctx, method, req)
			}
			n := int(pages.Add(1))
			return &mcp.ListToolsResult{Tools: page(n), NextCursor: fmt.Sprintf("page-%d", n+1)}, nil
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	return hs, &pages
}

func numberedTools(page, n int, desc string) []*mcp.Tool {
	tools := make([]*mcp.Tool, n)
	for i := range tools {
		tools[i] = &mcp.Tool{Name: fmt.Sprintf("t%d_%d", page, i), Description: desc, InputSchema: map[string]any{"type": "object"}}
	}
	return tools
}

// A server whose tool list goes on and on is refused at a bound: which
// bound is said, no tool of it is listed, its calls fail at once, and the
// listing stopped there.
func TestToolListIsBounded(t *testing.T) {
	big := strings.Repeat("d", 7<<20)
	for _, tc := range []struct {
		name     string
		page     func(n int) []*mcp.Tool
		why      string
		maxPages int64
	}{
		{"endless cursor", func(n int) []*mcp.Tool { return numberedTools(n, 1, "") }, "a nextCursor on page 100", 100},
		{"too many tools", func(n int) []*mcp.Tool { return numberedTools(n, 1000, "") }, "tool 10001", 11},
		{"too many bytes", func(n int) []*mcp.Tool { return numberedTools(n, 1, big) }, "32 MiB of definitions", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, pages := pagingServer(t, tc.page)
			p, _, logs := startProxy(t, Options{ConnectTimeout: 10 * time.Second}, ServerConfig{Name: "hostile", Type: TypeHTTP, URL: hs.URL})
			// A bound on a hang, not a measure: 35 MiB of pages decoded
			// under -race on a loaded machine took over 15 s (and
			// Statuses then said "ready" for a listing not yet done).
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st := p.Statuses(ctx)[0]
			want := fmt.Sprintf(`server "hostile" lists more tools than the bridge accepts (%s stopped the listing); `+
				"the bridge takes at most 100 pages of tools/list, 10000 tools and 32 MiB of tool definitions from one server", tc.why)
			if st.State != "unavailable" || !strings.Contains(st.Error, want) || st.Tools != 0 {
				t.Fatalf("status %+v\nwant unavailable, no tools, and %q", st, want)
			}
			if n := pages.Load(); n > tc.maxPages {
				t.Errorf("the server served %d pages, want at most %d", n, tc.maxPages)
			}
			if p.listed("hostile") != 0 || p.byName["hostile"].cachedTools() == nil {
				t.Errorf("%d tools listed, cache %v", p.listed("hostile"), p.byName["hostile"].cachedTools())
			}
			_, _, err := p.byName["hostile"].call(ctx, "t1_0", map[string]any{}, time.Second, false)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("a call after the refusal: %v", err)
			}
			if !strings.Contains(logs.String(), "upstream: refused") {
				t.Errorf("the refusal was not logged:\n%s", logs)
			}
		})
	}
}

// Within the bounds, every page is read.
func TestToolListPages(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "paged"}, &mcp.ServerOptions{PageSize: 5})
	for i := range 12 {
		s.AddTool(&mcp.Tool{Name: fmt.Sprintf("t%02d", i), InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close) // after the proxy's cleanup: its event stream is open until then
	p, _, _ := startProxy(t, Options{}, ServerConfig{Name: "paged", Type: TypeHTTP, URL: hs.URL})
	if st := p.Statuses(context.Background())[0]; st.State != "ready" || st.Tools != 12 {
		t.Fatalf("status %+v, want 12 tools", st)
	}
}
