package transport

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// newTestMCPServer is a tiny MCP server with two tools: echo, which returns
// its text, and block, which waits for its context to end and records that
// it did on cancelled (if non-nil).
func newTestMCPServer(t *testing.T, cancelled chan<- error) *mcp.Server {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echo the text"},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "block", Description: "block until cancelled"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			if cancelled != nil {
				cancelled <- ctx.Err()
			}
			return nil, nil, ctx.Err()
		})
	return srv
}

// stdioHarness runs ServeStdio over pipes.
type stdioHarness struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan string   // lines written by the server
	done  chan error    // ServeStdio's result
	log   *syncBuffer   // the server's log
	eof   chan struct{} // closed when the server's output has ended
	// timeout bounds the wait for each answer (5s if zero).
	timeout time.Duration
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startStdio(t *testing.T, ctx context.Context, srv *mcp.Server, maxLine int) *stdioHarness {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &stdioHarness{
		t:     t,
		in:    inW,
		lines: make(chan string, 100),
		done:  make(chan error, 1),
		log:   &syncBuffer{},
		eof:   make(chan struct{}),
	}
	log := zerolog.New(h.log)
	go func() {
		h.done <- serveStdio(ctx, srv, inR, outW, log, RequestLimit{Bytes: int64(maxLine), Setting: "test.max_line"}, stdioDrainTimeout)
		outW.Close()
	}()
	go func() {
		defer close(h.eof)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
	})
	return h
}

func (h *stdioHarness) send(line string) {
	h.t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		h.t.Fatalf("writing to the server: %v", err)
	}
}

// rpcMessage is any JSON-RPC message the server writes.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (h *stdioHarness) recv() rpcMessage {
	h.t.Helper()
	select {
	case line := <-h.lines:
		var m rpcMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			h.t.Fatalf("the server wrote a line that is not JSON: %q: %v", line, err)
		}
		if m.JSONRPC != "2.0" {
			h.t.Fatalf("the server wrote a line without \"jsonrpc\":\"2.0\": %q", line)
		}
		return m
	case <-time.After(cmp.Or(h.timeout, 5*time.Second)):
		h.t.Fatalf("no answer from the server in %s", cmp.Or(h.timeout, 5*time.Second))
		return rpcMessage{}
	}
}

// wait closes the input and returns ServeStdio's result.
func (h *stdioHarness) wait() error {
	h.t.Helper()
	h.in.Close()
	select {
	case err := <-h.done:
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("ServeStdio did not return in 10s after EOF")
		return nil
	}
}

const initializeLine = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
const initializedLine = `{"jsonrpc":"2.0","method":"notifications/initialized"}`

func (h *stdioHarness) initialize() {
	h.t.Helper()
	h.send(initializeLine)
	m := h.recv()
	if string(m.ID) != "1" || m.Error != nil || len(m.Result) == 0 {
		h.t.Fatalf("initialize: got id %s error %+v result %s", m.ID, m.Error, m.Result)
	}
	h.send(initializedLine)
}

func wantError(t *testing.T, m rpcMessage, code int, id string, msgParts ...string) {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("got a result, want error %d: %s", code, m.Result)
	}
	if m.Error.Code != code {
		t.Errorf("error code %d, want %d (message %q)", m.Error.Code, code, m.Error.Message)
	}
	if string(m.ID) != id {
		t.Errorf("error id %s, want %s", m.ID, id)
	}
	for _, p := range msgParts {
		if !strings.Contains(m.Error.Message, p) {
			t.Errorf("error message %q does not contain %q", m.Error.Message, p)
		}
	}
}

func toolNames(t *testing.T, m rpcMessage) []string {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("tools/list failed: %+v", m.Error)
	}
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		t.Fatalf("tools/list result %s: %v", m.Result, err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func TestStdioInitializeListCall(t *testing.T) {
	h := startStdio(t, t.Context(), newTestMCPServer(t, nil), DefaultMaxRequestBytes)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	m := h.recv()
	if string(m.ID) != "2" {
		t.Fatalf("tools/list answered with id %s", m.ID)
	}
	if names := toolNames(t, m); strings.Join(names, ",") != "block,echo" {
		t.Errorf("tools: %v, want [block echo]", names)
	}
	h.send(`{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	m = h.recv()
	if string(m.ID) != `"c"` || m.Error != nil || !strings.Contains(string(m.Result), "echo: hi") {
		t.Errorf("tools/call: id %s error %+v result %s", m.ID, m.Error, m.Result)
	}
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio after EOF: %v, want nil", err)
	}
}

func TestStdioMalformedLinesKeepTheSession(t *testing.T) {
	h := startStdio(t, t.Context(), newTestMCPServer(t, nil), DefaultMaxRequestBytes)
	h.initialize()

	h.send(`garbage`)
	wantError(t, h.recv(), -32700, "null", "parse error", "invalid character 'g'", "at byte 1", "one JSON-RPC 2.0 message")
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := h.recv(); string(m.ID) != "2" || len(toolNames(t, m)) != 2 {
		t.Fatalf("tools/list after garbage: %+v", m)
	}

	cases := []struct {
		line  string
		code  int
		id    string
		parts []string
	}{
		{`{"id":3}`, -32600, "3", []string{"invalid request", `"jsonrpc":"2.0" is missing`}},
		{`{"id":"x","method":"tools/list"}`, -32600, `"x"`, []string{`"jsonrpc":"2.0" is missing`}},
		{`{"jsonrpc":"1.0","id":4,"method":"tools/list"}`, -32600, "4", []string{`"jsonrpc" must be "2.0"`}},
		{`{"jsonrpc":"2.0","id":5}`, -32600, "5", []string{`needs a "method"`}},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`, -32600, "null", []string{`"id" must be a string, a number or null`}},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/list"`, -32700, "6", []string{"unexpected end of JSON input"}},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/list"} {}`, -32700, "7", []string{"after top-level value"}},
		{`[{"jsonrpc":"2.0","id":8,"method":"tools/list"}]`, -32600, "null", []string{"batches"}},
		{`42`, -32600, "null", []string{"must be a JSON object"}},
	}
	for _, c := range cases {
		h.send(c.line)
		m := h.recv()
		t.Run(c.line, func(t *testing.T) { wantError(t, m, c.code, c.id, c.parts...) })
	}

	// Blank lines are skipped without an answer, and CRLF is fine.
	h.send("")
	h.send("   \t")
	h.send(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}` + "\r")
	if m := h.recv(); string(m.ID) != "9" || m.Error != nil {
		t.Fatalf("after blank lines, got %+v, want the answer to id 9", m)
	}
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio after EOF: %v, want nil", err)
	}
	if n := strings.Count(h.log.String(), "malformed JSON-RPC line"); n != len(cases)+1 {
		t.Errorf("logged %d malformed lines, want %d:\n%s", n, len(cases)+1, h.log.String())
	}
}

func TestStdioOverlongLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxLine int
		long    int // the length of the overlong text
	}{
		{"small limit", 1000, 3000},
		{"real limit", DefaultMaxRequestBytes, DefaultMaxRequestBytes + 1<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startStdio(t, t.Context(), newTestMCPServer(t, nil), tc.maxLine)
			h.timeout = time.Minute // 16 MiB lines are slow under -race
			h.initialize()
			// The id comes first, so it is recovered.
			long := `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
				strings.Repeat("x", tc.long) + `"}}}`
			h.send(long)
			wantError(t, h.recv(), -32600, "11", "over the limit", "bytes (test.max_line)")
			// A line exactly at the limit still goes through.
			prefix := `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo","arguments":{"text":"`
			suffix := `"}}}`
			exact := prefix + strings.Repeat("y", tc.maxLine-len(prefix)-len(suffix)) + suffix
			if len(exact) != tc.maxLine {
				t.Fatalf("test line is %d bytes, not %d", len(exact), tc.maxLine)
			}
			h.send(exact)
			if m := h.recv(); string(m.ID) != "12" || m.Error != nil {
				t.Fatalf("line at the limit: id %s error %+v", m.ID, m.Error)
			}
			// One byte more is refused; the id is still recovered.
			h.send(exact[:len(prefix)] + "z" + exact[len(prefix):])
			wantError(t, h.recv(), -32600, "12", "over the limit")
			h.send(`{"jsonrpc":"2.0","id":13,"method":"tools/list"}`)
			if m := h.recv(); string(m.ID) != "13" || m.Error != nil {
				t.Fatalf("after the overlong line: %+v", m)
			}
			if err := h.wait(); err != nil {
				t.Errorf("ServeStdio after EOF: %v", err)
			}
		})
	}
}

// xReader yields n bytes of 'x' without allocating them.
type xReader struct{ n int }

func (r *xReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// An overlong line is skipped, not held in memory.
func TestStdioOverlongLineIsNotBuffered(t *testing.T) {
	const lineLen = 256 << 20
	in := io.MultiReader(
		strings.NewReader(initializeLine+"\n"+`{"jsonrpc":"2.0","id":77,"method":"x","params":"`),
		&xReader{n: lineLen},
		strings.NewReader(`"}`+"\n"+`{"jsonrpc":"2.0","id":78,"method":"tools/list"}`+"\n"),
	)
	var out syncBuffer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := serveStdio(t.Context(), newTestMCPServer(t, nil), in, &out, zerolog.Nop(), RequestLimit{Bytes: 4096}, stdioDrainTimeout); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("reading a %d MiB line allocated %d MiB", lineLen>>20, alloc>>20)
	}
	got := out.String()
	if !strings.Contains(got, `{"jsonrpc":"2.0","id":77,"error":{"code":-32600,`) || !strings.Contains(got, `"id":78,"result"`) {
		t.Errorf("output:\n%.2000s", got)
	}
}

// An overlong line is answered with its id wherever the id is (the
// TypeScript SDK writes it last, after the params), never one nested in the
// params; a request written right behind it, in the same write, is
// answered too; an overlong notification is not answered.
func TestStdioOverlongLineIDAnywhere(t *testing.T) {
	const maxLine = 4096
	big := strings.Repeat("x", 2*maxLine)
	cases := []struct {
		name, line, id string
		parts          []string
	}{
		{"id after params", `{"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + big + `"}},"jsonrpc":"2.0","id":21}`, "21", nil},
		{"string id with escapes", `{"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + big + `\\\""}},"jsonrpc":"2.0","id":"a\"b\\c\u00e9}"}`, `"a\"b\\c\u00e9}"`, nil},
		{"nested ids are not the request's", `{"method":"tools/call","params":{"id":99,"name":"echo","arguments":{"id":"nested","text":"\"id\":98 ` + big + `"}},"jsonrpc":"2.0","id":22}`, "22", nil},
		{"only nested ids", `{"method":"tools/call","params":{"id":99,"arguments":[{"id":98}],"text":"` + big + `"},"jsonrpc":"2.0","id":null}`, "null", nil},
		{"not an object", `["` + big + `"]`, "null", nil},
		{"an id too long to keep", `{"method":"tools/call","params":{"text":"` + big + `"},"jsonrpc":"2.0","id":"` + strings.Repeat("i", maxIDBytes) + `"}`, "null",
			[]string{"its id is over 128 bytes, so it is answered with id null"}},
	}
	h := startStdio(t, t.Context(), newTestMCPServer(t, nil), maxLine)
	h.initialize()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next := 100 + i
			// One write: the request behind the overlong line is already
			// buffered when the overlong line is read.
			h.send(c.line + "\n" + `{"jsonrpc":"2.0","id":` + itoa(next) + `,"method":"tools/list"}`)
			wantError(t, h.recv(), -32600, c.id, append(c.parts, "over the limit of 4096 bytes (test.max_line)")...)
			if m := h.recv(); string(m.ID) != itoa(next) || m.Error != nil || len(toolNames(t, m)) != 2 {
				t.Fatalf("the request behind the overlong line: %+v", m)
			}
		})
	}
	// A notification over the limit gets no answer: the next line read
	// answered is the request behind it.
	h.send(`{"method":"notifications/message","params":{"data":"` + big + `"},"jsonrpc":"2.0"}` + "\n" + `{"jsonrpc":"2.0","id":200,"method":"tools/list"}`)
	if m := h.recv(); string(m.ID) != "200" || m.Error != nil {
		t.Fatalf("after an overlong notification, got %+v, want the answer to id 200", m)
	}
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio after EOF: %v", err)
	}
	if !strings.Contains(h.log.String(), "skipped a JSON-RPC notification longer than the limit") {
		t.Errorf("the overlong notification was not logged:\n%s", h.log.String())
	}
}

// A 100 MB line with its id last, as the TypeScript SDK writes one, is
// answered with that id without being held, and the request right behind
// it is answered.
func TestStdioOverlongLineIDLastIsNotBuffered(t *testing.T) {
	const lineLen int64 = 100 << 20
	pattern := `print(\"id\": 1) # {[ \\ ` + strings.Repeat("x", 1000)
	in := io.MultiReader(
		strings.NewReader(initializeLine+"\n"+`{"method":"tools/call","params":{"name":"echo","arguments":{"text":"`),
		&repeatReader{pattern: []byte(pattern), n: lineLen - lineLen%int64(len(pattern))},
		strings.NewReader(`"}},"jsonrpc":"2.0","id":"call-1"}`+"\n"+`{"jsonrpc":"2.0","id":78,"method":"tools/list"}`+"\n"),
	)
	var out syncBuffer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := serveStdio(t.Context(), newTestMCPServer(t, nil), in, &out, zerolog.Nop(), RequestLimit{Bytes: 4096}, stdioDrainTimeout); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("reading a %d MiB line allocated %d MiB", lineLen>>20, alloc>>20)
	}
	got := out.String()
	if !strings.Contains(got, `{"jsonrpc":"2.0","id":"call-1","error":{"code":-32600,`) || !strings.Contains(got, `"id":78,"result"`) {
		t.Errorf("output:\n%.2000s", got)
	}
}

func TestStdioNotificationOnlySession(t *testing.T) {
	h := startStdio(t, t.Context(), newTestMCPServer(t, nil), DefaultMaxRequestBytes)
	h.send(initializedLine)
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`)
	h.send(`{"jsonrpc":"2.0","method":"notifications/unknown"}`)
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio: %v, want nil", err)
	}
	<-h.eof
	select {
	case l := <-h.lines:
		t.Errorf("the server answered a notification: %s", l)
	default:
	}
}

func TestStdioEOFWithoutInput(t *testing.T) {
	h := startStdio(t, t.Context(), newTestMCPServer(t, nil), DefaultMaxRequestBytes)
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio on empty input: %v, want nil", err)
	}
}

// The calls read before EOF are answered: piping requests into the server
// works.
func TestStdioEOFAnswersPendingCalls(t *testing.T) {
	var out syncBuffer
	in := strings.NewReader(initializeLine + "\n" + initializedLine + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"piped"}}}`) // no final newline
	if err := ServeStdio(t.Context(), newTestMCPServer(t, nil), in, &out, RequestLimit{}, zerolog.Nop()); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	got := out.String()
	for _, want := range []string{`"id":1`, `"id":2`, `"id":3`, "echo: piped"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
}

// EOF with a call that does not finish: the call is cancelled after the
// drain timeout and ServeStdio returns nil.
func TestStdioEOFCancelsStuckCalls(t *testing.T) {
	cancelled := make(chan error, 1)
	h := startStdio(t, t.Context(), newTestMCPServer(t, cancelled), DefaultMaxRequestBytes)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	time.Sleep(50 * time.Millisecond) // let the call start
	start := time.Now()
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio: %v, want nil", err)
	}
	if d := time.Since(start); d < stdioDrainTimeout/2 {
		t.Errorf("returned after %s, before the drain timeout %s", d, stdioDrainTimeout)
	}
	select {
	case err := <-cancelled:
		if err == nil {
			t.Error("the call's context ended without an error")
		}
	case <-time.After(time.Second):
		t.Error("the stuck call was not cancelled")
	}
}

func TestStdioContextCancel(t *testing.T) {
	cancelled := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	h := startStdio(t, ctx, newTestMCPServer(t, cancelled), DefaultMaxRequestBytes)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-h.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ServeStdio: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeStdio did not return after ctx was cancelled")
	}
	select {
	case <-cancelled:
	case <-time.After(time.Second):
		t.Error("the call in flight was not cancelled")
	}
}

// The client's notifications/cancelled reaches the call in flight.
func TestStdioClientCancelsCall(t *testing.T) {
	cancelled := make(chan error, 1)
	h := startStdio(t, t.Context(), newTestMCPServer(t, cancelled), DefaultMaxRequestBytes)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	time.Sleep(50 * time.Millisecond)
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("notifications/cancelled did not cancel the call")
	}
	h.send(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	for {
		// The cancelled call may be answered first.
		if m := h.recv(); string(m.ID) == "3" {
			break
		}
	}
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio: %v", err)
	}
}

// Answers and error answers never interleave within a line.
func TestStdioConcurrentWritesStayWhole(t *testing.T) {
	h := startStdio(t, t.Context(), newTestMCPServer(t, nil), DefaultMaxRequestBytes)
	h.initialize()
	const n = 200
	go func() {
		for i := range n {
			if i%2 == 0 {
				io.WriteString(h.in, `{"jsonrpc":"2.0","id":`+itoa(100+i)+`,"method":"tools/call","params":{"name":"echo","arguments":{"text":"`+strings.Repeat("a", 5000)+`"}}}`+"\n")
			} else {
				io.WriteString(h.in, "not json "+itoa(i)+"\n")
			}
		}
	}()
	var results, errs int
	for range n {
		m := h.recv() // fails on a broken line
		if m.Error != nil && m.Error.Code == -32700 {
			errs++
		} else if m.Error == nil {
			results++
		}
	}
	if results != n/2 || errs != n/2 {
		t.Errorf("got %d results and %d parse errors, want %d each", results, errs, n/2)
	}
	if err := h.wait(); err != nil {
		t.Errorf("ServeStdio: %v", err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// A write failure ends the session with an error.
func TestStdioWriteFailure(t *testing.T) {
	in := strings.NewReader(initializeLine + "\n")
	err := ServeStdio(t.Context(), newTestMCPServer(t, nil), in, failingWriter{}, RequestLimit{}, zerolog.Nop())
	if err == nil {
		t.Fatal("ServeStdio with a failing stdout returned nil")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }
