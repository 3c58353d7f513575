package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/bridge-mcp/bridge/policy"
)

// Bounds of one server's resource listing: resources/list and
// resources/templates/list pages, entries, and their size as JSON. A server
// past one is refused for resources (its tools are not affected): a cut
// list would look whole to the code, and to the search for a URI's server.
const (
	maxResourcePages     = 100
	maxResources         = 10_000
	maxResourceListBytes = 16 << 20
	// maxTemplateBytes bounds a template the bridge compiles to match URIs.
	maxTemplateBytes = 1024
)

// resourcesTTL is how long a server's listing is reused: servers need not
// say when their resources change (resources/list_changed), and a listing
// is also the map from a URI to its server.
const resourcesTTL = 30 * time.Second

// listing is one server's resources and templates, as listed by its
// session of generation gen.
type listing struct {
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
	// match are the templates compiled, in order; nil for one that does
	// not compile (or is too long): it is listed, never matched.
	match []*regexp.Regexp
	// uris are the resources' URIs, normalized (policy.NormalizeURI), to
	// find a URI among them.
	uris map[string]int
	gen  uint64
	at   time.Time
}

// resourceCache is an upstream's listing, kept resourcesTTL.
type resourceCache struct {
	mu    sync.Mutex
	cur   *listing
	stale bool // resources/list_changed since cur was listed
}

// fresh is the listing kept, if it is still good for generation gen.
func (c *resourceCache) fresh(gen uint64) *listing {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.cur; l != nil && !c.stale && l.gen == gen && time.Since(l.at) < resourcesTTL {
		return l
	}
	return nil
}

func (c *resourceCache) keep(l *listing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || l.gen >= c.cur.gen {
		c.cur, c.stale = l, false
	}
}

func (c *resourceCache) invalidate() {
	c.mu.Lock()
	c.stale = true
	c.mu.Unlock()
}

// hasResources says whether the server of session l declared resources in
// its capabilities: one that did not is never asked for them.
func hasResources(l live) bool {
	info := l.s.InitializeResult()
	return info != nil && info.Capabilities != nil && info.Capabilities.Resources != nil
}

// listResources is the listing of u's session l, from the cache if it is
// fresh. A server without resources has an empty one.
func (u *upstream) listResources(ctx context.Context, l live) (*listing, error) {
	if got := u.resCache.fresh(l.gen); got != nil {
		return got, nil
	}
	out := &listing{uris: map[string]int{}, gen: l.gen, at: time.Now()}
	if !hasResources(l) {
		u.resCache.keep(out)
		return out, nil
	}
	if err := u.fetchListing(ctx, l.s, out); err != nil {
		if ctx.Err() != nil {
			return nil, u.ctxError(ctx, "listing resources")
		}
		var long *toolListTooLong
		if errors.As(err, &long) {
			return nil, errorf(KindUpstream, "server %q lists more resources than the bridge takes (%s stopped the listing): at most %d pages, %d entries and %d MiB; "+
				"its resources are left out, name the one to read with read_resource(uri, server=...)", u.cfg.Name, long.why, maxResourcePages, maxResources, maxResourceListBytes>>20)
		}
		return nil, errorf(KindUpstream, "server %q: listing resources: %v", u.cfg.Name, u.scrub(err))
	}
	for i, r := range out.resources {
		if n, err := policy.NormalizeURI(r.URI); err == nil {
			if _, dup := out.uris[n]; !dup {
				out.uris[n] = i
			}
		}
	}
	for _, t := range out.templates {
		out.match = append(out.match, compileTemplate(t.URITemplate))
	}
	u.resCache.keep(out)
	return out, nil
}

// compileTemplate is the regexp of an RFC 6570 template's URIs, nil if it
// does not compile or is over maxTemplateBytes.
func compileTemplate(t string) *regexp.Regexp {
	if len(t) > maxTemplateBytes {
		return nil
	}
	tmpl, err := uritemplate.New(t)
	if err != nil {
		return nil
	}
	return tmpl.Regexp()
}

// fetchListing follows the pages of resources/list, then of
// resources/templates/list (which a server may not offer), within the
// bounds above.
func (u *upstream) fetchListing(ctx context.Context, s *mcp.ClientSession, out *listing) error {
	size, n := 0, 0
	count := func(v any, entries int) error {
		js, err := json.Marshal(v)
		if err != nil {
			return err
		}
		size, n = size+len(js), n+entries
		switch {
		case n > maxResources:
			return &toolListTooLong{fmt.Sprintf("entry %d", maxResources+1)}
		case size > maxResourceListBytes:
			return &toolListTooLong{fmt.Sprintf("%d MiB of entries", maxResourceListBytes>>20)}
		}
		return nil
	}
	params := &mcp.ListResourcesParams{}
	for page := 1; ; page++ {
		res, err := s.ListResources(ctx, params)
		if err != nil {
			return err
		}
		if err := count(res.Resources, len(res.Resources)); err != nil {
			return err
		}
		out.resources = append(out.resources, res.Resources...)
		if res.NextCursor == "" {
			break
		}
		if page == maxResourcePages {
			return &toolListTooLong{fmt.Sprintf("a nextCursor on page %d", maxResourcePages)}
		}
		params = &mcp.ListResourcesParams{Cursor: res.NextCursor}
	}
	tparams := &mcp.ListResourceTemplatesParams{}
	for page := 1; ; page++ {
		res, err := s.ListResourceTemplates(ctx, tparams)
		var we *jsonrpc.Error
		if errors.As(err, &we) && we.Code == jsonrpc.CodeMethodNotFound {
			return nil // no templates
		}
		if err != nil {
			return err
		}
		if err := count(res.ResourceTemplates, len(res.ResourceTemplates)); err != nil {
			return err
		}
		out.templates = append(out.templates, res.ResourceTemplates...)
		if res.NextCursor == "" {
			return nil
		}
		if page == maxResourcePages {
			return &toolListTooLong{fmt.Sprintf("a nextCursor on page %d of templates", maxResourcePages)}
		}
		tparams = &mcp.ListResourceTemplatesParams{Cursor: res.NextCursor}
	}
}

// holds says how l knows uri (normalized): listed (an exact URI), matched
// by a template, or not at all.
func (l *listing) holds(uri string) (listed *mcp.Resource, templated bool) {
	if i, ok := l.uris[uri]; ok {
		return l.resources[i], false
	}
	for _, re := range l.match {
		if re != nil && re.MatchString(uri) {
			return nil, true
		}
	}
	return nil, false
}

// readResource reads uri on session l within timeout. An upstream that
// says it has no such resource (-32002, or the invalid params some SDKs
// answer with) gives an unknown_resource error with its message.
func (u *upstream) readResource(ctx context.Context, l live, uri string, timeout time.Duration) (*mcp.ReadResourceResult, error) {
	if timeout <= 0 {
		timeout = u.opts.CallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := l.s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err == nil {
		if res == nil || res.Contents == nil {
			return nil, errorf(KindUpstream, "server %q answered the read of %s without contents", u.cfg.Name, clip(uri))
		}
		return res, nil
	}
	var we *jsonrpc.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, errorf(KindTimeout, "server %q: the read of %s did not answer within %s", u.cfg.Name, clip(uri), timeout)
	case ctx.Err() != nil:
		return nil, errorf(KindUpstream, "server %q: the read of %s was cancelled", u.cfg.Name, clip(uri))
	case errors.As(err, &we) && (we.Code == -32002 || we.Code == jsonrpc.CodeInvalidParams):
		return nil, errorf(KindUnknownResource, "server %q has no resource %s: %s", u.cfg.Name, clip(uri), clip(u.scrub(errors.New(we.Message)).Error()))
	}
	select {
	case <-l.done:
		return nil, errorf(KindUpstream, "server %q exited or disconnected during the read of %s; it is restarted on next use (%v)", u.cfg.Name, clip(uri), u.scrub(err))
	case <-time.After(50 * time.Millisecond):
	}
	return nil, errorf(KindUpstream, "server %q: reading %s: %v", u.cfg.Name, clip(uri), u.scrub(err))
}

// clip is s cut to 200 bytes for a message, quoted.
func clip(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%q...", s[:200])
	}
	return fmt.Sprintf("%q", s)
}
