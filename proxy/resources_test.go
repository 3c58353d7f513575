package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// resourceUpstream is an MCP server over streamable HTTP with resources:
// NAME://readme (text, listed with its size), NAME://logo (a blob),
// NAME://pair (two contents), NAME://big (bigBytes of text, listed
// without a size), NAME://huge (listed as 1 GiB: never to be read),
// shared://doc (on every such server), and the template NAME://item/{id}.
// reads counts the reads it served.
func resourceUpstream(t *testing.T, name string, reads *atomic.Int64) ServerConfig {
	t.Helper()
	const bigBytes = 4 << 10
	s := mcp.NewServer(&mcp.Implementation{Name: name}, nil)
	text := func(body string) mcp.ResourceHandler {
		return func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			reads.Add(1)
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, MIMEType: "text/plain", Text: body}}}, nil
		}
	}
	s.AddResource(&mcp.Resource{URI: name + "://readme", Name: "readme", MIMEType: "text/markdown", Size: 11, Description: "Read me"}, text("hello world"))
	s.AddResource(&mcp.Resource{URI: name + "://logo", Name: "logo", MIMEType: "image/png"},
		func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			reads.Add(1)
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, MIMEType: "image/png", Blob: []byte{0x89, 'P', 'N', 'G', 0}}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: name + "://pair", Name: "pair"},
		func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			reads.Add(1)
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI + "/a", Text: "a"}, {URI: r.Params.URI + "/b", Blob: []byte("b")}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: name + "://big", Name: "big"}, text(strings.Repeat("x", bigBytes)))
	s.AddResource(&mcp.Resource{URI: name + "://huge", Name: "huge", Size: 1 << 30}, text("never read"))
	s.AddResource(&mcp.Resource{URI: "shared://doc", Name: "doc"}, text(name))
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: name + "://item/{id}", Name: "item", MIMEType: "text/plain"},
		func(_ context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			reads.Add(1)
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: "item " + strings.TrimPrefix(r.Params.URI, name+"://item/")}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	return ServerConfig{Name: name, Type: TypeHTTP, URL: hs.URL}
}

// resourceClients starts a proxy of the upstreams "docs" and "files" (with
// resources) and "alpha" (without), under the policy in yaml (AUDIT: its
// audit file), and returns a client of it in this process and one over
// HTTP, as `bridge proxy --http` serves it, and the audit file.
func resourceClients(t *testing.T, yaml string) (clients map[string]*Client, reads *atomic.Int64, audit string) {
	t.Helper()
	reads = &atomic.Int64{}
	audit = filepath.Join(t.TempDir(), "audit.jsonl")
	opts := Options{}
	if yaml != "" {
		opts.Policy, _ = policyStore(t, strings.ReplaceAll(yaml, "AUDIT", audit))
	}
	p, local, _ := startProxy(t, opts, resourceUpstream(t, "docs", reads), resourceUpstream(t, "files", reads), stdioServer(t, "alpha"))
	ps := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.Server() }, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	remote, err := DialHTTP(ctx, ps.URL, "", "test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remote.Close(); ps.Close() })
	return map[string]*Client{"local": local, "remote": remote}, reads, audit
}

func readRes(c *Client, run, server, uri string, max int64) (*ResourceData, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.ReadResource(ctx, ResourceRequest{RunID: run, Server: server, URI: uri, MaxBytes: max})
}

func listRes(c *Client, run, server string) (ResourceList, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Resources(ctx, ResourceRequest{RunID: run, Server: server})
}

// Listings and reads, with no policy, from a proxy in this process and a
// remote one alike.
func TestResourcesListAndRead(t *testing.T) {
	clients, reads, _ := resourceClients(t, "")
	for placement, c := range clients {
		t.Run(placement, func(t *testing.T) {
			list, err := listRes(c, "r1", "")
			if err != nil {
				t.Fatal(err)
			}
			servers := map[string]int{}
			for _, r := range list.Resources {
				servers[r.Server]++
			}
			if len(list.Resources) != 12 || servers["docs"] != 6 || servers["files"] != 6 || len(list.Templates) != 2 {
				t.Fatalf("listing: %d resources %v, %d templates", len(list.Resources), servers, len(list.Templates))
			}
			// In the servers' order; each server's in its own (the SDK's: by URI).
			if r := list.Resources[4]; r.Server != "docs" || r.URI != "docs://readme" || r.MIMEType != "text/markdown" || r.Size == nil || *r.Size != 11 || r.Description != "Read me" {
				t.Errorf("docs' fifth resource %+v", r)
			}
			if r := list.Resources[0]; r.URI != "docs://big" || r.Size != nil || list.Resources[6].Server != "files" {
				t.Errorf("resources %+v", list.Resources)
			}
			if tm := list.Templates[1]; tm.Server != "files" || tm.URITemplate != "files://item/{id}" || tm.Name != "item" {
				t.Errorf("template %+v", tm)
			}
			one, err := listRes(c, "r1", "files")
			if err != nil || len(one.Resources) != 6 || len(one.Templates) != 1 {
				t.Fatalf("files' listing: %+v, %v", one, err)
			}
			if _, err := listRes(c, "r1", "nope"); kindOf(err) != KindUnknownSrv || !strings.Contains(err.Error(), "servers: docs, files, alpha") {
				t.Errorf("unknown server: %v", err)
			}
			// A server without resources has none.
			if none, err := listRes(c, "r1", "alpha"); err != nil || len(none.Resources)+len(none.Templates) != 0 {
				t.Errorf("alpha: %+v, %v", none, err)
			}

			before := reads.Load()
			d, err := readRes(c, "r1", "", "docs://readme", 0)
			if err != nil || d.Server != "docs" || len(d.Contents) != 1 || !d.Contents[0].Text || string(d.Contents[0].Data) != "hello world" {
				t.Fatalf("readme: %+v, %v", d, err)
			}
			d, err = readRes(c, "r1", "files", "files://logo", 0)
			if err != nil || d.Contents[0].Text || string(d.Contents[0].Data) != "\x89PNG\x00" || d.Contents[0].MIMEType != "image/png" {
				t.Fatalf("logo: %+v, %v", d, err)
			}
			d, err = readRes(c, "r1", "", "docs://pair", 0)
			if err != nil || len(d.Contents) != 2 || !d.Contents[0].Text || d.Contents[1].Text || d.Contents[1].URI != "docs://pair/b" {
				t.Fatalf("pair: %+v, %v", d, err)
			}
			// A template finds its server; the scheme is matched in any case,
			// and the URI read is the normal form.
			d, err = readRes(c, "r1", "", "FILES://item/42", 0)
			if err != nil || d.Server != "files" || d.URI != "files://item/42" || string(d.Contents[0].Data) != "item 42" {
				t.Fatalf("item: %+v, %v", d, err)
			}
			if n := reads.Load() - before; n != 4 {
				t.Errorf("the upstreams served %d reads, want 4", n)
			}
			// Two servers list shared://doc: the caller must say which.
			_, err = readRes(c, "r1", "", "shared://doc", 0)
			if kindOf(err) != KindUnknownResource || !strings.Contains(err.Error(), "servers docs, files all have the resource") {
				t.Errorf("shared: %v", err)
			}
			if d, err := readRes(c, "r1", "files", "shared://doc", 0); err != nil || string(d.Contents[0].Data) != "files" {
				t.Errorf("shared from files: %+v, %v", d, err)
			}
			_, err = readRes(c, "r1", "", "docs://nothing", 0)
			if kindOf(err) != KindUnknownResource || !strings.Contains(err.Error(), "servers with resources: docs, files") {
				t.Errorf("unknown URI: %v", err)
			}
			_, err = readRes(c, "r1", "docs", "docs://nothing", 0)
			if kindOf(err) != KindUnknownResource || !strings.Contains(err.Error(), `server "docs" has no resource "docs://nothing"`) {
				t.Errorf("unknown URI of docs: %v", err)
			}
			_, err = readRes(c, "r1", "alpha", "alpha://x", 0)
			if kindOf(err) != KindUnknownResource || !strings.Contains(err.Error(), "offers no resources") {
				t.Errorf("alpha: %v", err)
			}
			// What the caller takes bounds a read.
			_, err = readRes(c, "r1", "docs", "docs://big", 100)
			if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "4 KiB, over the 100 bytes this read takes") {
				t.Errorf("big: %v", err)
			}
		})
	}
}

// The policy decides, counts, bounds and audits every listing and read,
// in both placements.
func TestResourcesUnderPolicy(t *testing.T) {
	clients, reads, audit := resourceClients(t, `
version: 1
tools:
  servers: ["docs", "files", "alpha"]
resources:
  default: deny
  rules:
    - server: "docs"
      uri: "docs://secret*"
      action: deny
      reason: "no secrets"
    - server: "docs"
      action: allow
  max_bytes: 1Ki
budgets:
  max_calls_per_run: 12
audit:
  file: AUDIT
`)
	for placement, c := range clients {
		t.Run(placement, func(t *testing.T) {
			run := "r" + placement[:1]
			list, err := listRes(c, run, "")
			if err != nil || len(list.Resources) != 6 || list.Resources[0].Server != "docs" || len(list.Templates) != 1 {
				t.Fatalf("listing: %+v, %v", list, err)
			}
			_, err = listRes(c, run, "files")
			if kindOf(err) != KindDenied || !strings.Contains(err.Error(), `the policy lets the code read no resource of server "files"`) {
				t.Errorf("files' listing: %v", err)
			}
			if _, err := readRes(c, run, "", "docs://readme", 0); err != nil {
				t.Fatalf("readme: %v", err)
			}
			before := reads.Load()
			for uri, want := range map[string]string{
				"files://readme":          "denied by policy: no resources rule matched server \"files\"",
				"docs://secret/key":       "no secrets",
				"docs://%73ecret/key":     "no secrets",
				"docs://a/../secret/key":  `".." segment`,
				"docs://a/%2e%2e/secret/": `".." segment`,
			} {
				_, err := readRes(c, run, strings.Split(uri, ":")[0], uri, 0)
				if kindOf(err) != KindDenied || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v, want denied: %s", uri, err, want)
				}
			}
			// Both placements report the decision and the server.
			var rep CallReport
			_, err = c.ReadResource(context.Background(), ResourceRequest{RunID: run, URI: "docs://secret/key", Server: "docs", Report: &rep})
			if kindOf(err) != KindDenied || rep.Decision != "deny" || rep.Server != "docs" {
				t.Errorf("report of a denied read: %+v (%v)", rep, err)
			}
			// Over resources.max_bytes: refused once read; listed as over
			// it, never read.
			_, err = readRes(c, run, "docs", "docs://big", 0)
			if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "is 4 KiB, over the 1 KiB the policy's resources.max_bytes allows") {
				t.Errorf("big: %v", err)
			}
			_, err = readRes(c, run, "docs", "docs://huge", 0)
			if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "is 1 GiB as the server lists it, over the 1 KiB the policy's resources.max_bytes allows; it was not read") {
				t.Errorf("huge: %v", err)
			}
			if n := reads.Load() - before; n != 1 {
				t.Errorf("the upstreams served %d reads, want 1 (big): denied and over-listed ones must not reach them", n)
			}
			// 11 so far (2 listings, 9 reads); the 12th goes, then the budget is spent.
			if _, err := readRes(c, run, "docs", "docs://logo", 0); err != nil {
				t.Fatalf("logo: %v", err)
			}
			_, err = readRes(c, run, "docs", "docs://logo", 0)
			if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "budgets.max_calls_per_run") {
				t.Errorf("past the budget: %v", err)
			}
		})
	}
	var readme, denied, listing int
	for _, rec := range auditLines(t, audit) {
		switch {
		case rec["event"] == "resource_read" && rec["uri"] == "docs://readme":
			readme++
			if rec["decision"] != "allow" || rec["result_bytes"] != 11.0 || rec["rule"] != "resources.rules[1] (line 12)" || rec["server"] != "docs" {
				t.Errorf("readme record %v", rec)
			}
		case rec["event"] == "resource_read" && rec["uri"] == "docs://secret/key":
			denied++
			if rec["decision"] != "deny" || rec["rule"] != "resources.rules[0] (line 8)" {
				t.Errorf("secret record %v", rec)
			}
		case rec["event"] == "resource_list" && rec["server"] == "*":
			listing++
		}
		for _, v := range rec {
			if s, ok := v.(string); ok && strings.Contains(s, "hello world") {
				t.Errorf("a record holds the contents: %v", rec)
			}
		}
	}
	if readme != 2 || denied != 6 || listing != 2 {
		t.Errorf("records: %d readme, %d denied secrets, %d listings; want 2, 6, 2", readme, denied, listing)
	}
}

// A policy that denies tools by default denies resources too, unless it
// says otherwise; tools.servers and tokenized servers keep theirs.
func TestResourcesFollowToolsDefault(t *testing.T) {
	clients, _, _ := resourceClients(t, `
version: 1
tools:
  servers: ["docs", "alpha"]
  default: deny
tokenize:
  results:
    - {server: "alpha"}
`)
	c := clients["local"]
	if _, err := readRes(c, "r1", "docs", "docs://readme", 0); kindOf(err) != KindDenied || !strings.Contains(err.Error(), "resources.default is deny") {
		t.Errorf("docs: %v", err)
	}
	if _, err := readRes(c, "r1", "files", "files://readme", 0); kindOf(err) != KindUnknownSrv {
		t.Errorf("files, outside tools.servers: %v", err)
	}
	if list, err := listRes(c, "r1", ""); err != nil || len(list.Resources)+len(list.Templates) != 0 {
		t.Errorf("listing: %+v, %v", list, err)
	}
	if _, err := readRes(c, "r1", "alpha", "alpha://x", 0); kindOf(err) != KindDenied || !strings.Contains(err.Error(), "tokenize.results") {
		t.Errorf("alpha: %v", err)
	}
}

// A server whose resource listing goes on and on is refused for resources
// at a bound, and says so; its tools are not affected.
func TestResourceListIsBounded(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "endless"}, nil)
	s.AddResource(&mcp.Resource{URI: "x://0", Name: "0"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "x://0", Text: "zero"}}}, nil
	})
	var pages atomic.Int64
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "resources/list" {
				return next(ctx, method, req)
			}
			n := pages.Add(1)
			return &mcp.ListResourcesResult{Resources: []*mcp.Resource{{URI: fmt.Sprintf("x://%d", n), Name: "r"}}, NextCursor: fmt.Sprintf("p%d", n)}, nil
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	_, c, _ := startProxy(t, Options{}, ServerConfig{Name: "endless", Type: TypeHTTP, URL: hs.URL})
	_, err := listRes(c, "r1", "endless")
	if kindOf(err) != KindUpstream || !strings.Contains(err.Error(), `server "endless" lists more resources than the bridge takes (a nextCursor on page 100 stopped the listing)`) {
		t.Fatalf("listing: %v", err)
	}
	if n := pages.Load(); n != 100 {
		t.Errorf("the server served %d pages, want 100", n)
	}
	// Named, its resource is still read; found by URI, it cannot be.
	if d, err := readRes(c, "r1", "endless", "x://0", 0); err != nil || string(d.Contents[0].Data) != "zero" {
		t.Errorf("read x://0: %+v, %v", d, err)
	}
	if _, err := readRes(c, "r1", "", "x://0", 0); kindOf(err) != KindUnknownResource || !strings.Contains(err.Error(), "servers that could not be listed: endless") {
		t.Errorf("read x://0 without its server: %v", err)
	}
	// A template too long to compile is listed, never matched.
	if compileTemplate(strings.Repeat("a", maxTemplateBytes+1)) != nil || compileTemplate("x://{bad") != nil || compileTemplate("x://{id}") == nil {
		t.Error("compileTemplate")
	}
}
