package toolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

// The upstream servers' resources: the code's queries (resources,
// read_resource) and a run's input read by URI ([Resources.ReadResource]),
// all through the proxy's policy, counted in the run's call budget,
// audited there, and added to the run's trace.

// maxResourceArgs bounds a resource query's arguments, before they are
// decoded: a URI of policy.MaxURIBytes and a server name fit.
const maxResourceArgs = 8 << 10

// maxReadAnswer bounds the answer to read_resource: a frame, less room for
// its own fields. It holds a read of 8 MiB (resources.max_bytes at most)
// in base64 (10.7 MiB).
const maxReadAnswer = relay.MaxFrameSize - 4096

// ResourceData is an upstream resource read for a run.
type ResourceData struct {
	// Server is the server that answered; URI the resource read, as the
	// policy decided on it (policy.NormalizeURI).
	Server, URI string
	// MIMEType is the MIME type the server gave ("" when it gave none).
	MIMEType string
	// Text says the resource is text (Data in UTF-8); otherwise Data is a
	// blob's bytes.
	Text bool
	Data []byte
}

// Resources reads upstream resources for runs: what [New]'s handler
// answers the code's read_resource with, and a run's inputs by URI.
type Resources struct {
	up   Upstreams
	runs *Runs
}

// NewResources reads resources through up, recording each read in the
// trace of its run (runs, as given to [New]: nil records none).
func NewResources(up Upstreams, runs *Runs) *Resources {
	return &Resources{up: up, runs: runs}
}

// ReadResource reads uri from server (from the one server that lists it,
// or has a template that matches it, when server is "") for run runID,
// through the proxy and its policy, exactly as the run's code would:
// tools.servers and the resources rules decide it, it counts as one call
// of the run's budgets.max_calls_per_run, it is audited (resource_read:
// server, URI, bytes) and goes in the run's trace. It brings at most limit
// bytes (when more than 0) and the policy's resources.max_bytes. A
// resource read as several contents is refused: it is not one file. The
// error is a *[proxy.Error] whose Kind is a relay error type (denied,
// limit, unknown_server, unknown_resource, timeout, upstream, invalid).
// ctx's deadline is the run's: a remote proxy keeps the run's budget until
// it.
func (r *Resources) ReadResource(ctx context.Context, runID, server, uri string, limit int64) (ResourceData, error) {
	d, err := r.read(ctx, runID, server, uri, limit)
	if err != nil {
		return ResourceData{}, err
	}
	if len(d.Contents) != 1 {
		return ResourceData{}, &proxy.Error{Kind: relay.ErrInvalid, Message: fmt.Sprintf(
			"the resource %s of server %q has %d contents, not one: it cannot be one file", uri, d.Server, len(d.Contents))}
	}
	c := d.Contents[0]
	return ResourceData{Server: d.Server, URI: d.URI, MIMEType: c.MIMEType, Text: c.Text, Data: c.Data}, nil
}

// read reads a resource for run runID and records it in the run's trace.
func (r *Resources) read(ctx context.Context, runID, server, uri string, limit int64) (*proxy.ResourceData, error) {
	start := time.Now()
	var rep proxy.CallReport
	d, err := r.up.ReadResource(ctx, proxy.ResourceRequest{RunID: runID, Server: server, URI: uri, MaxBytes: limit, Report: &rep})
	n := 0
	if d != nil {
		n = int(min(d.Size(), 1<<40))
	}
	r.record(runID, policy.ResourcesRead, uri, rep, err, n, time.Since(start))
	return d, err
}

// list lists resources for run runID and records it in the run's trace.
func (r *Resources) list(ctx context.Context, runID, server string) (proxy.ResourceList, error) {
	start := time.Now()
	var rep proxy.CallReport
	l, err := r.up.Resources(ctx, proxy.ResourceRequest{RunID: runID, Server: server, Report: &rep})
	r.record(runID, policy.ResourcesList, "", rep, err, 0, time.Since(start))
	return l, err
}

// record adds a listing or read to its run's trace (as tool op of the
// server; uri for a read), if the run is known.
func (r *Resources) record(runID, op, uri string, rep proxy.CallReport, err error, bytes int, took time.Duration) {
	run := r.runs.get(runID)
	if run == nil {
		return
	}
	e := TraceEntry{Server: proxy.KnownName(rep.Server), Tool: op, URI: clipURI(uri),
		DurationMS: float64(took.Microseconds()) / 1000, ResultBytes: bytes}
	switch rep.Decision {
	case "allow":
		e.Decision = "allowed"
	case "deny":
		e.Decision = "denied"
	default:
		e.Decision = "refused"
	}
	if err != nil {
		e.Error = failed(err).Error.Type
	}
	run.Record(e)
}

// clipURI is a URI as a trace entry holds it: at most 256 bytes.
func clipURI(uri string) string {
	if len(uri) > 256 {
		return uri[:256]
	}
	return uri
}

// resourceArgs are a resource query's arguments.
type resourceArgs struct {
	Server *string `json:"server"`
	URI    *string `json:"uri"`
}

// parseResourceArgs reads a resource query's arguments: server a name or
// null, and for read_resource a URI.
func parseResourceArgs(op string, args json.RawMessage) (server, uri string, bad *relay.ToolResult) {
	want := `resources needs {"server": NAME or null}`
	if op == relay.OpReadResource {
		want = `read_resource needs {"uri": URI, "server": NAME or null}`
	}
	var a resourceArgs
	if len(args) > maxResourceArgs || json.Unmarshal(args, &a) != nil {
		r := invalid("%s (at most %d bytes)", want, maxResourceArgs)
		return "", "", &r
	}
	if a.Server != nil {
		server = *a.Server
		if server == "" || len(server) > maxServerName {
			r := toolError(relay.ErrUnknownServer, "no MCP server has the name %q: give a server's name, or None", clipURI(server))
			return "", "", &r
		}
	}
	if op == relay.OpReadResource {
		if a.URI == nil || *a.URI == "" {
			r := invalid("%s", want)
			return "", "", &r
		}
		uri = *a.URI
	}
	return server, uri, nil
}

// resourceQuery answers the resources and read_resource queries. The
// proxy does the work (each is one of the run's calls): only the answer's
// encoding is the bridge's own.
func (h *toolHandler) resourceQuery(ctx context.Context, runID string, q relay.Query) relay.ToolResult {
	server, uri, bad := parseResourceArgs(q.Op, q.Args)
	if bad != nil {
		return *bad
	}
	if q.Op == relay.OpResources {
		l, err := h.res.list(ctx, runID, server)
		if err != nil {
			return failed(err)
		}
		if l.Resources == nil {
			l.Resources = []proxy.Resource{}
		}
		if l.Templates == nil {
			l.Templates = []proxy.ResourceTemplate{}
		}
		js, err := json.Marshal(l)
		if err != nil {
			return failed(err)
		}
		if len(js) > h.maxResult {
			return toolError(relay.ErrLimit, "the list of resources is %s, over the %s an answer may have in the sandbox: name a server, mcp_tools.resources(server)",
				units.Bytes(int64(len(js))), units.Bytes(int64(h.maxResult)))
		}
		return relay.ToolResult{Result: js}
	}
	d, err := h.res.read(ctx, runID, server, uri, 0)
	if err != nil {
		return failed(err)
	}
	return readAnswer(d)
}

// readContent is one content of a read_resource answer: its bytes in
// base64 (JSON's []byte), text or not, so that an answer's size is known
// from the read's (4/3 of it) whatever the text holds.
type readContent struct {
	URI  string `json:"uri"`
	MIME string `json:"mime,omitempty"`
	Text bool   `json:"text"`
	Data []byte `json:"data"`
}

// readAnswer is the answer to read_resource: {server, uri, contents}.
func readAnswer(d *proxy.ResourceData) relay.ToolResult {
	out := struct {
		Server   string        `json:"server"`
		URI      string        `json:"uri"`
		Contents []readContent `json:"contents"`
	}{Server: d.Server, URI: d.URI, Contents: []readContent{}}
	for _, c := range d.Contents {
		data := c.Data
		if data == nil {
			data = []byte{}
		}
		out.Contents = append(out.Contents, readContent{URI: c.URI, MIME: c.MIMEType, Text: c.Text, Data: data})
	}
	js, err := json.Marshal(out)
	if err != nil {
		return failed(err)
	}
	if len(js) > maxReadAnswer {
		return toolError(relay.ErrLimit, "the resource %s is %s, too large for one answer into the sandbox (%s): lower resources.max_bytes",
			d.URI, units.Bytes(d.Size()), units.Bytes(maxReadAnswer))
	}
	return relay.ToolResult{Result: js}
}
