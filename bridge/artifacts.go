package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/internal/units"
)

// Files out: what the code leaves in /tmp/outputs comes back with the
// run_python result, inline (images as ImageContent, the rest as embedded
// resources) or, with a host folder for them (policy artifacts.dir), as
// resource links the client reads back with resources/read. Each stored
// file belongs to the client session whose call made it: another session
// neither lists nor reads it.

// runSink is the Sink of one run: output to the progress notifications,
// files to the run's collector.
type runSink struct {
	*artifacts.Collector
	output func(stream, data string)
}

func (s runSink) Output(stream, data string) { s.output(stream, data) }

// ArtifactOutput is one file in structuredContent.artifacts.
type ArtifactOutput struct {
	Name     string `json:"name"`
	MIMEType string `json:"mime_type"`
	Bytes    int64  `json:"bytes"`
	Inlined  bool   `json:"inlined"`
	URI      string `json:"uri,omitempty"`
	Note     string `json:"note,omitempty"`
}

// inlineURI names a file returned inline: where the code wrote it in the
// sandbox. It is not readable with resources/read (the bytes are in the
// result).
func inlineURI(name string) string {
	return "sandbox:///tmp/outputs/" + (&url.URL{Path: name}).EscapedPath()
}

// renderArtifacts adds the files of a run to its result: one content item
// per returned file, one line in the text saying what came back and what
// did not, and structuredContent.artifacts.
func renderArtifacts(r *mcp.CallToolResult, out *Output, list []artifacts.Artifact, unlisted int) {
	if len(list) == 0 && unlisted == 0 {
		return
	}
	var returned, missing []string
	for _, a := range list {
		out.Artifacts = append(out.Artifacts, ArtifactOutput{Name: a.Name, MIMEType: a.MIME, Bytes: a.Bytes, Inlined: a.Inlined, URI: a.URI, Note: a.Note})
		switch {
		case a.Inlined && a.Kind == artifacts.Image:
			r.Content = append(r.Content, &mcp.ImageContent{Data: a.Data, MIMEType: a.MIME})
		case a.Inlined && a.Kind == artifacts.Text: // Text is UTF-8 throughout (artifacts.Classify)
			r.Content = append(r.Content, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: inlineURI(a.Name), MIMEType: a.MIME, Text: string(a.Data)}})
		case a.Inlined:
			r.Content = append(r.Content, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: inlineURI(a.Name), MIMEType: a.MIME, Blob: a.Data}})
		case a.URI != "":
			size := a.Bytes
			r.Content = append(r.Content, &mcp.ResourceLink{URI: a.URI, Name: a.Name, MIMEType: a.MIME, Size: &size})
		}
		if a.Returned() {
			how := ""
			if !a.Inlined {
				how = " by reference"
			}
			returned = append(returned, fmt.Sprintf("%s (%s, %s%s)", a.Name, a.MIME, units.Bytes(a.Bytes), how))
		} else {
			missing = append(missing, fmt.Sprintf("%s (%s): %s", a.Name, units.Bytes(a.Bytes), a.Note))
		}
	}
	out.ArtifactsUnlisted = unlisted
	var b strings.Builder
	if len(returned) > 0 {
		fmt.Fprintf(&b, "[files: %s]", strings.Join(returned, ", "))
	}
	const shown = 5
	if n := len(missing); n > 0 || unlisted > 0 {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		more := n - min(n, shown) + unlisted
		b.WriteString("[not returned: " + strings.Join(missing[:min(n, shown)], "; "))
		if more > 0 {
			if n > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%d more (structuredContent.artifacts lists them)", more)
		}
		b.WriteString("]")
	}
	if t, ok := r.Content[0].(*mcp.TextContent); ok && b.Len() > 0 {
		if t.Text == "(no output)" {
			t.Text = b.String()
		} else {
			t.Text = strings.TrimRight(t.Text, "\n") + "\n" + b.String()
		}
	}
}

// owners remembers which principal made each run's stored files, so that
// resources/list and resources/read answer each principal with its own,
// whichever connection or stateless request asks.
// An entry goes when the store no longer holds files of its run: it holds
// at most one entry per run with live files, and one more.
type owners struct {
	mu   sync.Mutex
	runs map[string]string // run id: principal
}

// set records that principal made run's files, and forgets the runs of
// which the store holds nothing any more.
func (o *owners) set(run, principal string, live []artifacts.Entry) {
	o.prune(live)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.runs == nil {
		o.runs = map[string]string{}
	}
	o.runs[run] = principal
}

// owns reports whether principal made run's files.
func (o *owners) owns(principal, run string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	owner, ok := o.runs[run]
	return ok && owner == principal
}

// prune forgets the runs of which the store holds nothing any more.
func (o *owners) prune(live []artifacts.Entry) {
	keep := map[string]bool{}
	for _, e := range live {
		keep[e.Run] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for run := range o.runs {
		if !keep[run] {
			delete(o.runs, run)
		}
	}
}

// resourcesMiddleware answers resources/list and resources/read from the
// store, each principal with its own runs' files.
func (s *Server) resourcesMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/list":
			r, ok := req.(*mcp.ListResourcesRequest)
			if !ok {
				break
			}
			live, who := s.opts.Store.List(), s.principal(r)
			s.owners.prune(live)
			res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
			for _, e := range live {
				if s.owners.owns(who, e.Run) {
					size := e.Size
					res.Resources = append(res.Resources, &mcp.Resource{URI: e.URI, Name: e.Name, MIMEType: e.MIME, Size: size,
						Description: fmt.Sprintf("a file of run %s, kept until %s", e.Run, e.Expires.UTC().Format("2006-01-02 15:04:05Z"))})
				}
			}
			return res, nil
		case "resources/read":
			r, ok := req.(*mcp.ReadResourceRequest)
			if !ok || r.Params == nil {
				break
			}
			return s.readArtifact(ctx, s.principal(r), r.Params.URI)
		}
		return next(ctx, method, req)
	}
}

// maxReadsAtOnce bounds the resources/read answers made at once: each
// holds its file whole, and again base64-encoded in the answer.
const maxReadsAtOnce = 2

// readLimit is the largest stored file one resources/read returns, and the
// setting that says so.
func (s *Server) readLimit() (int64, string) {
	if s.opts.Policy == nil {
		return s.opts.Artifacts.MaxBytesRead, "the bridge's Options.Artifacts.MaxBytesRead"
	}
	return s.opts.Policy.Current().Policy.Artifacts.MaxBytesRead, "artifacts.max_bytes_read"
}

// readArtifact reads one stored file for principal: a file over the read
// limit is refused before it is read, and at most maxReadsAtOnce answers
// are made at once (the others wait their turn, or their caller).
func (s *Server) readArtifact(ctx context.Context, principal, uri string) (*mcp.ReadResourceResult, error) {
	run, _, err := artifacts.ParseURI(uri)
	if err != nil || !s.owners.owns(principal, run) {
		// Another principal's file is as unknown as one that never was.
		return nil, mcp.ResourceNotFoundError(uri)
	}
	select {
	case s.reads <- struct{}{}:
		defer func() { <-s.reads }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	e, rc, err := s.opts.Store.Open(uri)
	if err != nil {
		if errors.Is(err, artifacts.ErrNotFound) || errors.Is(err, artifacts.ErrExpired) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	defer rc.Close()
	if most, key := s.readLimit(); most > 0 && e.Size > most {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"%s is %d bytes, over the limit of %s one resources/read returns (%s): a client on this machine can read it at %s until %s; "+
				"or have the code write less (a summary, a sample, a compressed file)",
			uri, e.Size, units.FormatSize(most), key, s.opts.Store.Path(e), e.Expires.UTC().Format("2006-01-02 15:04:05Z"))}
	}
	data, err := io.ReadAll(io.LimitReader(rc, e.Size+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", uri, err)
	}
	c := &mcp.ResourceContents{URI: e.URI, MIMEType: e.MIME}
	if e.Kind == artifacts.Text && utf8.Valid(data) && jsonTextSize(data) <= base64Size(len(data)) {
		c.Text = string(data)
	} else {
		// Base64 bounds the answer at 4/3 of the file; text that JSON
		// escapes (control characters, six bytes each) could take six times.
		c.Blob = data
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

// jsonTextSize is the size of text as a JSON string, escapes included
// (encoding/json's: HTML characters and U+2028, U+2029 too).
func jsonTextSize(text []byte) int {
	n := 2
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		case c == 0xe2 && i+2 < len(text) && text[i+1] == 0x80 && (text[i+2] == 0xa8 || text[i+2] == 0xa9):
			n += 6
			i += 2
		default:
			n++
		}
	}
	return n
}

// base64Size is the size of n bytes as a base64 JSON string.
func base64Size(n int) int { return (n+2)/3*4 + 2 }
