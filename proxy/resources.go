package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
)

// The upstream servers' MCP resources, for the code: a listing of one
// server's (or every server's) resources and templates, and the read of
// one resource, each for a run and through the policy's gate as a tool
// call is (the run's call budget, tools.servers, the resources section's
// rules, audited: resource_list and resource_read records). A read with no
// server named goes to the one server whose listing has the URI (or a
// template that matches it). What a read brings is bounded by
// resources.max_bytes, and by what the caller takes: MCP's resources/read
// answers in one message, which the upstream's transport reads whole (at
// most 16 MiB, as a tool result), so nothing is streamed; a resource its
// server lists as larger is refused before it is read, and one found
// larger once read is refused, never passed on.

// Resource is one resource an upstream server lists, as the code sees it.
type Resource struct {
	Server      string `json:"server"`
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	MIMEType    string `json:"mime,omitempty"`
	Size        *int64 `json:"size,omitempty"`
	Description string `json:"description,omitempty"`
}

// ResourceTemplate is one resource template (RFC 6570) an upstream server
// lists: the URIs it expands to can be read.
type ResourceTemplate struct {
	Server      string `json:"server"`
	URITemplate string `json:"uri_template"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	MIMEType    string `json:"mime,omitempty"`
	Description string `json:"description,omitempty"`
}

// ResourceList is a listing: the resources and templates the policy lets
// the code read, in the servers' order.
type ResourceList struct {
	Resources []Resource         `json:"resources"`
	Templates []ResourceTemplate `json:"templates"`
}

// ResourceRequest is one listing or read the bridge makes for a run.
type ResourceRequest struct {
	RunID string
	// Server names the server; "" lists every server's resources, or
	// reads the URI from the one server that has it.
	Server string
	// URI is the resource to read (not for a listing).
	URI string
	// MaxBytes, if more than 0, is the most the caller takes of a read;
	// the policy's resources.max_bytes bounds it in any case.
	MaxBytes int64
	// Report, if set, is filled in with the decision and the server.
	Report *CallReport
	// Trace is the span the request is made in: a remote proxy's HTTP
	// request carries it.
	Trace trace.SpanContext
}

// ResourceContent is one of the contents a read returned.
type ResourceContent struct {
	URI      string
	MIMEType string
	// Text says the content was text (Data holds it in UTF-8); otherwise
	// it was a blob (Data holds its bytes, decoded).
	Text bool
	Data []byte
}

// ResourceData is what a read returned: the server that answered, the URI
// read (normalized, see [policy.NormalizeURI]) and its contents, in the
// server's order (most resources have one).
type ResourceData struct {
	Server   string
	URI      string
	Contents []ResourceContent
}

// Size is the bytes of d's contents together.
func (d *ResourceData) Size() int64 {
	var n int64
	for _, c := range d.Contents {
		n += int64(len(c.Data))
	}
	return n
}

// resourceCall is a listing or read as the proxy gets it, from this
// process or a remote bridge: deadline is when its run ends (zero: not
// said).
type resourceCall struct {
	runID, server, uri string
	maxBytes           int64
	deadline           time.Time
}

// callFor is the resourceCall of req made in ctx (whose deadline is the
// run's).
func callFor(ctx context.Context, req ResourceRequest) resourceCall {
	rc := resourceCall{runID: req.RunID, server: req.Server, uri: req.URI, maxBytes: req.MaxBytes}
	if d, ok := ctx.Deadline(); ok {
		rc.deadline = d
	}
	return rc
}

// end records a resource operation that went to its upstream (err nil, or
// how it failed) and returns err.
func (c *callRecord) end(err error) error {
	_, _, err = c.finish(&mcp.CallToolResult{}, nil, err)
	return err
}

// resourceRun is the first step of a resource operation's gate: its run,
// pinned to the policy it started with, and its call budget (every
// listing and read counts, refused ones too). pol is nil without a policy.
func (p *Proxy) resourceRun(c *callRecord, deadline time.Time) (*policy.Policy, error) {
	store := p.opts.Policy
	if store == nil {
		return nil, nil
	}
	snap := store.Current()
	if c.rec.RunID != "" {
		run, err := store.Remote(c.rec.RunID, deadline)
		if err != nil {
			return nil, c.refuseRun(err)
		}
		c.run, snap = run, run.Snap
	}
	pol := snap.Policy
	if c.run != nil && !c.run.TakeCall() {
		return nil, c.refuse(KindLimit, "budgets.max_calls_per_run", fmt.Sprintf(
			"this run has made the %d tool calls the policy allows (budgets.max_calls_per_run; resource reads and listings count)", pol.Budgets.MaxCallsPerRun))
	}
	return pol, nil
}

// reachableUnder are the upstreams pol lets the code reach (all, for nil).
func (p *Proxy) reachableUnder(pol *policy.Policy) []*upstream {
	var out []*upstream
	for _, u := range p.ups {
		if pol.ServerAllowed(u.cfg.Name) {
			out = append(out, u)
		}
	}
	return out
}

// upstreamUnder is the upstream server, if pol lets the code reach it;
// else an unknown_server error naming those it does.
func (p *Proxy) upstreamUnder(pol *policy.Policy, server string) (*upstream, error) {
	if u := p.byName[server]; u != nil && pol.ServerAllowed(server) {
		return u, nil
	}
	var names []string
	for _, u := range p.reachableUnder(pol) {
		names = append(names, u.cfg.Name)
	}
	msg := fmt.Sprintf("no MCP server %q%s", server, didYouMean(server, names))
	if len(names) > 0 {
		msg += fmt.Sprintf(" (servers: %s)", strings.Join(names, ", "))
	}
	return nil, &Error{Kind: KindUnknownSrv, Message: msg}
}

// callTimeout is the timeout of one upstream request under pol.
func (p *Proxy) callTimeout(pol *policy.Policy) time.Duration {
	if pol != nil {
		return pol.Budgets.CallTimeout
	}
	return p.opts.CallTimeout
}

// listResources lists the resources (and templates) of rc.server, or of
// every server the policy opens when it is "", leaving out those the rules
// deny. A server that cannot be listed is left out of a listing of every
// server (the bridge's log says why); named, its error is the answer.
func (p *Proxy) listResources(ctx context.Context, rc resourceCall, report *CallReport) (ResourceList, error) {
	name := rc.server
	if name == "" {
		name = "*"
	}
	c := &callRecord{p: p, start: time.Now(), resource: true, rec: policy.Call{RunID: rc.runID, Server: name, Tool: policy.ResourcesList}}
	pol, err := p.resourceRun(c, rc.deadline)
	if err != nil {
		return ResourceList{}, err
	}
	ups := p.reachableUnder(pol)
	if rc.server != "" {
		u, err := p.upstreamUnder(pol, rc.server)
		if err != nil {
			return ResourceList{}, c.refuse(KindUnknownSrv, "", err.Error())
		}
		if pol != nil && !pol.ResourcesOpen(rc.server) {
			report.Decision = "deny"
			d := pol.DecideResource(rc.server, "")
			return ResourceList{}, c.refuse(KindDenied, pol.ResourceRuleName(d), fmt.Sprintf(
				"the policy lets the code read no resource of server %q (%s)", rc.server, pol.ResourceRuleName(d)))
		}
		ups = []*upstream{u}
	}
	report.Decision, c.rec.Allowed = "allow", true
	c.rec.Rule = "resources"
	lists := make([]*listing, len(ups))
	errs := make([]error, len(ups))
	var wg sync.WaitGroup
	for i, u := range ups {
		if pol != nil && !pol.ResourcesOpen(u.cfg.Name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = p.listingOf(ctx, u, p.callTimeout(pol))
		}()
	}
	wg.Wait()
	var out ResourceList
	for i, u := range ups {
		if errs[i] != nil && rc.server != "" {
			return ResourceList{}, c.end(errs[i])
		}
		if errs[i] != nil {
			p.log.Debug().Str("server", u.cfg.Name).Str("error", errs[i].Error()).Msg("proxy: resources left out of a listing")
		}
		if lists[i] != nil {
			lists[i].addTo(&out, u.cfg.Name, pol)
		}
	}
	if js, err := json.Marshal(out); err == nil {
		c.rec.ResultBytes = len(js)
	}
	return out, c.end(nil)
}

// listingOf is u's listing, its session started if need be (and checked
// against its pins), within timeout.
func (p *Proxy) listingOf(ctx context.Context, u *upstream, timeout time.Duration) (*listing, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := p.checkedSession(ctx, u)
	if err != nil {
		return nil, err
	}
	if w := p.withheld(u.cfg.Name); w != "" {
		return nil, errorf(KindDenied, "what server %s says about itself changed since the bridge first connected to it (%s), and the policy refuses a changed server (tools.on_change: deny)", u.cfg.Name, w)
	}
	return u.listResources(ctx, l)
}

// addTo adds what pol lets the code read of l, server's listing, to out.
func (l *listing) addTo(out *ResourceList, server string, pol *policy.Policy) {
	for _, r := range l.resources {
		n, err := policy.NormalizeURI(r.URI)
		if err != nil || !pol.DecideResource(server, n).Allow {
			continue
		}
		e := Resource{Server: server, URI: r.URI, Name: r.Name, Title: r.Title, MIMEType: r.MIMEType, Description: r.Description}
		if r.Size > 0 {
			size := r.Size
			e.Size = &size
		}
		out.Resources = append(out.Resources, e)
	}
	for _, t := range l.templates {
		out.Templates = append(out.Templates, ResourceTemplate{Server: server, URITemplate: t.URITemplate, Name: t.Name,
			Title: t.Title, MIMEType: t.MIMEType, Description: t.Description})
	}
}

// readResource reads rc.uri, from rc.server or the server that has it,
// through the gate: the run's budget, the URI's normal form, the server,
// the resources rules, tools.on_change; then the read, and its size
// against resources.max_bytes (and rc.maxBytes).
func (p *Proxy) readResource(ctx context.Context, rc resourceCall, report *CallReport) (*ResourceData, error) {
	c := &callRecord{p: p, start: time.Now(), resource: true,
		rec: policy.Call{RunID: rc.runID, Server: rc.server, Tool: policy.ResourcesRead, URI: clipURIForAudit(rc.uri)}}
	pol, err := p.resourceRun(c, rc.deadline)
	if err != nil {
		return nil, err
	}
	uri, err := policy.NormalizeURI(rc.uri)
	if err != nil {
		report.Decision = "deny"
		return nil, c.refuse(KindDenied, "resources.uri", err.Error())
	}
	c.rec.URI = uri
	u, err := p.resourceTarget(ctx, c, pol, rc.server, uri, report)
	if err != nil {
		return nil, err
	}
	limit, limitName := resourceLimit(pol, rc.maxBytes)
	sess, err := p.checkedSession(ctx, u)
	c.rec.Allowed = true
	switch {
	case err != nil:
		return nil, c.end(err)
	case !hasResources(sess):
		return nil, c.end(errorf(KindUnknownResource, "server %q offers no resources (it declares no resources capability)", u.cfg.Name))
	}
	if l := u.resCache.fresh(sess.gen); l != nil {
		if r, _ := l.holds(uri); r != nil && r.Size > limit {
			c.rec.Allowed = false
			return nil, c.refuse(KindLimit, "resources.max_bytes", fmt.Sprintf("the resource %s of server %q is %s as the server lists it, over the %s %s; it was not read",
				clip(uri), u.cfg.Name, units.Bytes(r.Size), units.Bytes(limit), limitName))
		}
	}
	upStart := time.Now()
	res, err := u.readResource(ctx, sess, uri, p.callTimeout(pol))
	report.Upstream = time.Since(upStart)
	if err != nil {
		return nil, c.end(err)
	}
	data := &ResourceData{Server: u.cfg.Name, URI: uri}
	for _, ct := range res.Contents {
		if ct == nil {
			continue
		}
		rcn := ResourceContent{URI: ct.URI, MIMEType: ct.MIMEType, Text: ct.Blob == nil, Data: ct.Blob}
		if rcn.Text {
			rcn.Data = []byte(ct.Text)
		}
		data.Contents = append(data.Contents, rcn)
	}
	c.rec.ResultBytes = int(min(data.Size(), 1<<40))
	if n := data.Size(); n > limit {
		return nil, c.end(errorf(KindLimit, "the resource %s of server %q is %s, over the %s %s", clip(uri), u.cfg.Name, units.Bytes(n), units.Bytes(limit), limitName))
	}
	return data, c.end(nil)
}

// resourceLimit is the most one read may bring under pol, and when the
// caller asks for less (max), that; and what to call it in an error.
func resourceLimit(pol *policy.Policy, max int64) (int64, string) {
	limit, name := int64(0), ""
	if pol != nil {
		limit, name = pol.Resources.MaxBytes, "the policy's resources.max_bytes allows"
	}
	if max > 0 && (limit == 0 || max < limit) {
		limit, name = max, "this read takes"
	}
	if limit == 0 {
		limit, name = maxUpstreamMessage, "one message from an upstream may carry"
	}
	return limit, name
}

// resourceTarget is the upstream a read of uri goes to, rc's server or the
// one that has uri, once the rules let it: refusals are recorded.
func (p *Proxy) resourceTarget(ctx context.Context, c *callRecord, pol *policy.Policy, server, uri string, report *CallReport) (*upstream, error) {
	if server == "" {
		found, err := p.resourceServer(ctx, pol, uri)
		if err != nil {
			return nil, c.refuse(err.Kind, "", err.Message)
		}
		server, c.rec.Server = found, found
	}
	u, err := p.upstreamUnder(pol, server)
	if err != nil {
		return nil, c.refuse(KindUnknownSrv, "", err.Error())
	}
	report.Server = server
	d := pol.DecideResource(server, uri)
	c.rec.Rule, report.Decision = pol.ResourceRuleName(d), d.Verdict()
	if !d.Allow {
		return nil, c.refuse(KindDenied, c.rec.Rule, d.Reason)
	}
	if w := p.withheld(server); w != "" {
		report.Decision = "deny"
		return nil, c.refuse(KindDenied, "tools.on_change", fmt.Sprintf(
			"what server %s says about itself changed since the bridge first connected to it (%s), and the policy refuses a changed server (tools.on_change: deny)", server, w))
	}
	return u, nil
}

// resourceServer finds the one server that has uri among those pol lets
// the code reach: the server whose listing has it, else the one with a
// template that matches it. None, or several, is an unknown_resource error
// that names the servers to choose from.
func (p *Proxy) resourceServer(ctx context.Context, pol *policy.Policy, uri string) (string, *Error) {
	ups := p.reachableUnder(pol)
	lists := make([]*listing, len(ups))
	errs := make([]error, len(ups))
	var wg sync.WaitGroup
	for i, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = p.listingOf(ctx, u, p.callTimeout(pol))
		}()
	}
	wg.Wait()
	var listed, templated, withResources, failed []string
	for i, u := range ups {
		switch l := lists[i]; {
		case errs[i] != nil:
			failed = append(failed, u.cfg.Name)
		case len(l.resources)+len(l.templates) > 0:
			withResources = append(withResources, u.cfg.Name)
			r, t := l.holds(uri)
			if r != nil {
				listed = append(listed, u.cfg.Name)
			} else if t {
				templated = append(templated, u.cfg.Name)
			}
		}
	}
	for _, found := range [][]string{listed, templated} {
		switch len(found) {
		case 0:
			continue
		case 1:
			return found[0], nil
		}
		sort.Strings(found)
		return "", errorf(KindUnknownResource, "servers %s all have the resource %s: name one (read_resource(uri, server=...))", strings.Join(found, ", "), clip(uri))
	}
	msg := fmt.Sprintf("no server lists the resource %s, nor a template that matches it", clip(uri))
	if len(withResources) > 0 {
		msg += fmt.Sprintf("; servers with resources: %s (name one with server=... to read a URI it does not list)", strings.Join(withResources, ", "))
	}
	if len(failed) > 0 {
		msg += fmt.Sprintf("; servers that could not be listed: %s", strings.Join(failed, ", "))
	}
	return "", errorf(KindUnknownResource, "%s", msg)
}

// clipURIForAudit is a URI as an audit record may hold it: at most
// policy.MaxURIBytes (a longer one is refused anyway).
func clipURIForAudit(uri string) string {
	if len(uri) > policy.MaxURIBytes {
		return uri[:policy.MaxURIBytes]
	}
	return uri
}
