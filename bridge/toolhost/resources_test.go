package toolhost

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/proxy"
)

// traceRun keeps the trace entries of a run.
type traceRun struct {
	mu      sync.Mutex
	entries []TraceEntry
}

func (r *traceRun) Ask(context.Context, proxy.Question) proxy.Answer { return proxy.Answer{} }
func (r *traceRun) Record(e TraceEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

func TestResourceQueries(t *testing.T) {
	up := newFake()
	size := int64(5)
	up.resources = proxy.ResourceList{
		Resources: []proxy.Resource{{Server: "docs", URI: "docs://readme", Name: "readme", MIMEType: "text/plain", Size: &size}},
		Templates: []proxy.ResourceTemplate{{Server: "docs", URITemplate: "docs://item/{id}", Name: "item"}},
	}
	up.read = &proxy.ResourceData{Server: "docs", URI: "docs://readme", Contents: []proxy.ResourceContent{
		{URI: "docs://readme", MIMEType: "text/plain", Text: true, Data: []byte("hé\x00\"")},
		{URI: "docs://readme/logo", MIMEType: "image/png", Data: []byte{0x89, 'P'}},
	}}
	up.decision = "allow"
	runs := NewRuns()
	run := &traceRun{}
	defer runs.Register("run", run)()
	h := New(up, Options{Runs: runs})

	var list struct {
		Resources []map[string]any `json:"resources"`
		Templates []map[string]any `json:"templates"`
	}
	if err := query(t, h, relay.OpResources, `{"server":null}`, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Resources) != 1 || list.Resources[0]["uri"] != "docs://readme" || list.Resources[0]["mime"] != "text/plain" ||
		list.Resources[0]["size"] != 5.0 || len(list.Templates) != 1 || list.Templates[0]["uri_template"] != "docs://item/{id}" {
		t.Fatalf("listing %+v", list)
	}
	var read struct {
		Server, URI string
		Contents    []struct {
			URI, MIME string
			Text      bool
			Data      string
		}
	}
	if err := query(t, h, relay.OpReadResource, `{"uri":"docs://readme","server":"docs"}`, &read); err != nil {
		t.Fatal(err)
	}
	if read.Server != "docs" || len(read.Contents) != 2 || !read.Contents[0].Text || read.Contents[1].Text || read.Contents[1].MIME != "image/png" {
		t.Fatalf("read %+v", read)
	}
	for i, want := range []string{"hé\x00\"", "\x89P"} {
		if got, err := base64.StdEncoding.DecodeString(read.Contents[i].Data); err != nil || string(got) != want {
			t.Errorf("content %d: %q, %v", i, got, err)
		}
	}
	if g := up.gotRead; g.RunID != "run" || g.Server != "docs" || g.URI != "docs://readme" || g.MaxBytes != 0 {
		t.Errorf("the proxy was asked %+v", g)
	}
	// Both are in the run's trace, with the URI read.
	if len(run.entries) != 2 || run.entries[0].Tool != "resources/list" || run.entries[1].Tool != "resources/read" ||
		run.entries[1].URI != "docs://readme" || run.entries[1].Decision != "allowed" || run.entries[1].ResultBytes != 7 || run.entries[1].Server != "docs" {
		t.Errorf("trace %+v", run.entries)
	}

	// Bad arguments are refused before the proxy is asked.
	for args, want := range map[string]string{
		`{}`:                        "read_resource needs {\"uri\": URI",
		`{"uri":""}`:                "read_resource needs",
		`{"uri":5}`:                 "read_resource needs",
		`{"uri":"x:y","server":""}`: "no MCP server has the name",
		`{"uri":"` + strings.Repeat("u", maxResourceArgs) + `"}`: "at most 8192 bytes",
	} {
		if err := query(t, h, relay.OpReadResource, args, &read); err == nil || !strings.Contains(err.Message, want) {
			t.Errorf("%.40s: %+v, want %q", args, err, want)
		}
	}
	// The proxy's refusals keep their kind.
	up.err = &proxy.Error{Kind: proxy.KindUnknownResource, Message: "no server lists the resource"}
	up.decision = ""
	if err := query(t, h, relay.OpReadResource, `{"uri":"x:y"}`, &read); err == nil || err.Type != relay.ErrUnknownResource {
		t.Errorf("unknown: %+v", err)
	}
	if e := run.entries[len(run.entries)-1]; e.Decision != "refused" || e.Error != relay.ErrUnknownResource || e.Server != proxy.UnknownName {
		t.Errorf("trace of the refusal %+v", e)
	}
}

// ReadResource, for a run's inputs: one content, the same gate.
func TestReadResourceForInputs(t *testing.T) {
	up := newFake()
	up.decision = "allow"
	up.read = &proxy.ResourceData{Server: "docs", URI: "docs://a.csv", Contents: []proxy.ResourceContent{{URI: "docs://a.csv", MIMEType: "text/csv", Text: true, Data: []byte("a,b\n")}}}
	runs := NewRuns()
	run := &traceRun{}
	defer runs.Register("run", run)()
	r := NewResources(up, runs)
	d, err := r.ReadResource(context.Background(), "run", "", "docs://a.csv", 1<<20)
	if err != nil || d.Server != "docs" || d.URI != "docs://a.csv" || d.MIMEType != "text/csv" || !d.Text || string(d.Data) != "a,b\n" {
		t.Fatalf("ReadResource = %+v, %v", d, err)
	}
	if up.gotRead.MaxBytes != 1<<20 || up.gotRead.Server != "" || len(run.entries) != 1 {
		t.Errorf("asked %+v; trace %+v", up.gotRead, run.entries)
	}
	up.read.Contents = append(up.read.Contents, up.read.Contents[0])
	if _, err := r.ReadResource(context.Background(), "run", "", "docs://a.csv", 0); err == nil || !strings.Contains(err.Error(), "has 2 contents, not one") {
		t.Errorf("two contents: %v", err)
	}
	up.err = &proxy.Error{Kind: proxy.KindDenied, Message: "no secrets"}
	_, err = r.ReadResource(context.Background(), "run", "", "docs://secret", 0)
	var pe *proxy.Error
	if !asProxyError(err, &pe) || pe.Kind != relay.ErrDenied {
		t.Errorf("denied: %v", err)
	}
}

func asProxyError(err error, pe **proxy.Error) bool {
	e, ok := err.(*proxy.Error)
	*pe = e
	return ok
}

// A read whose answer would not fit a frame is refused with a limit error.
func TestReadAnswerBound(t *testing.T) {
	big := &proxy.ResourceData{Server: "s", URI: "s://big", Contents: []proxy.ResourceContent{{Data: make([]byte, maxReadAnswer)}}}
	if r := readAnswer(big); r.Error == nil || r.Error.Type != relay.ErrLimit {
		t.Fatalf("big answer: %+v", r.Error)
	}
	ok := &proxy.ResourceData{Server: "s", URI: "s://ok", Contents: []proxy.ResourceContent{{Data: make([]byte, 8<<20)}}}
	r := readAnswer(ok)
	if r.Error != nil {
		t.Fatalf("8 MiB: %v", r.Error.Message)
	}
	var v map[string]any
	if err := json.Unmarshal(r.Result, &v); err != nil || len(r.Result) > maxReadAnswer {
		t.Fatalf("8 MiB answer: %d bytes, %v", len(r.Result), err)
	}
}
