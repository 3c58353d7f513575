package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/bridge-mcp/bridge/internal/units"
)

// Resource listings and reads between a bridge and a remote proxy (bridge
// proxy --http): MCP's resources/list and resources/read, told apart from
// a plain MCP client's (which gets the proxy's own resource,
// bridge://servers, as before) by MetaServer in their _meta, present even
// when empty (every server, or the one that has the URI). They carry the
// run as a tools/call does (MetaRunID, MetaRunTimeLeft), the most the
// bridge takes of a read (MetaMaxBytes), and come back with MetaServer
// (the server that answered) and MetaDecision; a listing's templates ride
// in its _meta (MetaTemplates). A refusal is a JSON-RPC error of code
// codeRefused whose data is {"kind": KIND}.

// Keys of the _meta of resource requests and answers (see above).
const (
	MetaMaxBytes  = "io.github.bridge-mcp/max-bytes"
	MetaTemplates = "io.github.bridge-mcp/templates"
	// MetaURI, on a read's answer, is the URI read as the policy decided
	// on it (policy.NormalizeURI).
	MetaURI = "io.github.bridge-mcp/uri"
)

// codeRefused is the JSON-RPC error code of a resource request the proxy
// refused or failed: an implementation-defined server error.
const codeRefused = -32050

// resourceMeta is the _meta of a resource request for req made in ctx.
func resourceMeta(ctx context.Context, req ResourceRequest) mcp.Meta {
	m := callMeta(ctx, Call{RunID: req.RunID, Trace: req.Trace}, req.Server, "")
	delete(m, MetaTool)
	if req.MaxBytes > 0 {
		m[MetaMaxBytes] = req.MaxBytes
	}
	return m
}

// resourceCallOf is the resourceCall a remote bridge's request carries.
func resourceCallOf(meta mcp.Meta, uri string, now time.Time) resourceCall {
	rc := resourceCall{uri: uri, deadline: runDeadline(meta, now)}
	rc.runID, _ = meta[MetaRunID].(string)
	rc.server, _ = meta[MetaServer].(string)
	if f, ok := meta[MetaMaxBytes].(float64); ok && f > 0 && f < math.MaxInt64 {
		rc.maxBytes = int64(f)
	}
	return rc
}

// serveResources answers a bridge's resources/list or resources/read
// (handled true); any other request, a plain client's among them, is not
// its to answer.
func (p *Proxy) serveResources(ctx context.Context, method string, req mcp.Request) (res mcp.Result, handled bool, err error) {
	var rep CallReport
	switch r := req.(type) {
	case *mcp.ListResourcesRequest:
		if r.Params == nil || !hasKey(r.Params.Meta, MetaServer) || method != "resources/list" {
			return nil, false, nil
		}
		list, err := p.listResources(ctx, resourceCallOf(r.Params.Meta, "", time.Now()), &rep)
		if err != nil {
			return nil, true, wireError(err, &rep)
		}
		out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}, Meta: mcp.Meta{MetaDecision: rep.encode(), MetaTemplates: list.Templates}}
		for _, e := range list.Resources {
			mr := &mcp.Resource{URI: e.URI, Name: e.Name, Title: e.Title, MIMEType: e.MIMEType, Description: e.Description,
				Meta: mcp.Meta{MetaServer: e.Server}}
			if e.Size != nil {
				mr.Size = *e.Size
			}
			out.Resources = append(out.Resources, mr)
		}
		return out, true, nil
	case *mcp.ReadResourceRequest:
		if r.Params == nil || !hasKey(r.Params.Meta, MetaServer) || method != "resources/read" {
			return nil, false, nil
		}
		data, err := p.readResource(ctx, resourceCallOf(r.Params.Meta, r.Params.URI, time.Now()), &rep)
		if err != nil {
			return nil, true, wireError(err, &rep)
		}
		out := &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{}, Meta: mcp.Meta{MetaServer: data.Server, MetaURI: data.URI, MetaDecision: rep.encode()}}
		for _, c := range data.Contents {
			rc := &mcp.ResourceContents{URI: c.URI, MIMEType: c.MIMEType}
			if c.Text {
				rc.Text = string(c.Data)
			} else {
				rc.Blob = c.Data
				if rc.Blob == nil {
					rc.Blob = []byte{}
				}
			}
			out.Contents = append(out.Contents, rc)
		}
		return out, true, nil
	}
	return nil, false, nil
}

func hasKey(m mcp.Meta, k string) bool {
	_, ok := m[k]
	return ok
}

// wireData is the data of a refusal's JSON-RPC error: its kind, and how
// the policy decided and on which server, when it got that far.
type wireData struct {
	Kind     string `json:"kind"`
	Decision string `json:"decision,omitempty"`
	Server   string `json:"server,omitempty"`
}

// wireError is err as a JSON-RPC error that keeps its kind and rep's
// decision.
func wireError(err error, rep *CallReport) error {
	d := wireData{Kind: KindUpstream, Decision: rep.Decision, Server: rep.Server}
	msg := err.Error()
	var pe *Error
	if errors.As(err, &pe) {
		d.Kind, msg = pe.Kind, pe.Message
	}
	data, _ := json.Marshal(d)
	return &jsonrpc.Error{Code: codeRefused, Message: msg, Data: data}
}

// fromWire is a remote proxy's failed answer to a resource request as an
// *[Error]: its kind and message when the proxy refused or failed it (rep
// gets its decision), else what went wrong on the way (scrubbed of the
// proxy URL's secrets).
func (c *Client) fromWire(ctx context.Context, err error, what string, rep *CallReport) error {
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code == codeRefused {
		var d wireData
		if json.Unmarshal(we.Data, &d) == nil && d.Kind != "" && len(d.Kind) <= 32 {
			rep.decode(d.Decision)
			if len(d.Server) <= MaxNameLen {
				rep.Server = d.Server
			}
			return &Error{Kind: d.Kind, Message: we.Message}
		}
	}
	if ctx.Err() != nil {
		return errorf(KindUpstream, "%s cancelled", what)
	}
	if errors.As(err, &we) && (we.Code == -32002 || we.Code == jsonrpc.CodeInvalidParams) {
		return errorf(KindUpstream, "the MCP proxy does not read upstream resources for the bridge (a bridge proxy older than this bridge?): %s", what)
	}
	return errorf(KindUpstream, "the MCP proxy failed %s: %v", what, c.scrub.Error(err))
}

// Resources lists the resources and templates of req.Server (every
// server's when ""), those the proxy's policy lets the code read, for
// req.RunID's run. The listing counts as one call of the run's budget.
func (c *Client) Resources(ctx context.Context, req ResourceRequest) (ResourceList, error) {
	rep := req.Report
	if rep == nil {
		rep = &CallReport{}
	}
	if c.local != nil {
		return c.local.listResources(ctx, callFor(ctx, req), rep)
	}
	ctx = traced(ctx, req.Trace)
	res, err := c.sess.ListResources(ctx, &mcp.ListResourcesParams{Meta: resourceMeta(ctx, req)})
	if err != nil {
		return ResourceList{}, c.fromWire(ctx, err, "the listing of resources", rep)
	}
	if !hasKey(res.Meta, MetaDecision) {
		return ResourceList{}, errorf(KindUpstream, "the MCP proxy does not list upstream resources for the bridge (a bridge proxy older than this bridge?)")
	}
	rep.decode(res.Meta[MetaDecision])
	out := ResourceList{Resources: []Resource{}, Templates: []ResourceTemplate{}}
	for _, r := range res.Resources {
		server, _ := r.Meta[MetaServer].(string)
		if server == "" {
			continue
		}
		e := Resource{Server: server, URI: r.URI, Name: r.Name, Title: r.Title, MIMEType: r.MIMEType, Description: r.Description}
		if r.Size > 0 {
			size := r.Size
			e.Size = &size
		}
		out.Resources = append(out.Resources, e)
	}
	if js, err := json.Marshal(res.Meta[MetaTemplates]); err == nil {
		_ = json.Unmarshal(js, &out.Templates)
	}
	return out, nil
}

// ReadResource reads req.URI from req.Server (or from the one server that
// has it) for req.RunID's run, through the proxy's policy: an *[Error] of
// kind denied, limit, unknown_server, unknown_resource, timeout or
// upstream when it cannot. What it returns is at most req.MaxBytes (when
// set) and the proxy's resources.max_bytes.
func (c *Client) ReadResource(ctx context.Context, req ResourceRequest) (*ResourceData, error) {
	rep := req.Report
	if rep == nil {
		rep = &CallReport{}
	}
	if c.local != nil {
		return c.local.readResource(ctx, callFor(ctx, req), rep)
	}
	ctx = traced(ctx, req.Trace)
	what := fmt.Sprintf("the read of %s", clip(req.URI))
	res, err := c.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.URI, Meta: resourceMeta(ctx, req)})
	if err != nil {
		return nil, c.fromWire(ctx, err, what, rep)
	}
	rep.decode(res.Meta[MetaDecision])
	server, _ := res.Meta[MetaServer].(string)
	if server == "" {
		return nil, errorf(KindUpstream, "the MCP proxy does not read upstream resources for the bridge (a bridge proxy older than this bridge?): %s", what)
	}
	rep.Server = server
	data := &ResourceData{Server: server, URI: req.URI}
	if u, ok := res.Meta[MetaURI].(string); ok && u != "" && len(u) <= len(req.URI) { // normalizing never lengthens a URI
		data.URI = u
	}
	for _, ct := range res.Contents {
		if ct == nil {
			continue
		}
		rc := ResourceContent{URI: ct.URI, MIMEType: ct.MIMEType, Text: ct.Blob == nil, Data: ct.Blob}
		if rc.Text {
			rc.Data = []byte(ct.Text)
		}
		data.Contents = append(data.Contents, rc)
	}
	// The proxy bounds it; a proxy that does not is not believed.
	if req.MaxBytes > 0 && data.Size() > req.MaxBytes {
		return nil, errorf(KindLimit, "the resource %s of server %q is %s, over the %s this read takes", clip(req.URI), server, units.Bytes(data.Size()), units.Bytes(req.MaxBytes))
	}
	return data, nil
}

// traced is ctx carrying sc for the HTTP transport's traceparent.
func traced(ctx context.Context, sc trace.SpanContext) context.Context {
	if sc.IsValid() {
		return trace.ContextWithSpanContext(ctx, sc)
	}
	return ctx
}
