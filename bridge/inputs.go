package bridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// InputsDir is where a call's inputs land in the sandbox.
const InputsDir = "/tmp/inputs"

// inputArg is one item of a call's inputs argument, as given.
type inputArg struct {
	Path   *string `json:"path"`
	Text   *string `json:"text"`
	Base64 *string `json:"base64"`
	URI    *string `json:"uri"`
	// Server names the upstream server of a resource URI, when more than
	// one could hold it.
	Server *string `json:"server"`
}

// inputSpec is one checked input: its path under InputsDir and its bytes
// (text, base64) or the URI to read them from.
type inputSpec struct {
	path   string
	data   []byte // text or base64, decoded
	uri    string
	server string // the upstream server of uri, "" to let the proxy find it
	source string // "text", "base64" or the URI, for the audit
}

// parseInputs checks a call's inputs argument: a list of objects, each
// with a path and exactly one of text, base64 and uri. The bounds of the
// policy are checked once the URIs are resolved (resolveInputs).
func parseInputs(raw json.RawMessage) ([]inputSpec, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf(`inputs must be a list of {"path": "rel/path", and one of "text", "base64" or "uri"}, got %s`, clipJSON(raw))
	}
	specs := make([]inputSpec, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		sp, err := parseInput(item)
		if err != nil {
			return nil, fmt.Errorf("inputs[%d]: %w", i, err)
		}
		if seen[sp.path] {
			return nil, fmt.Errorf("inputs[%d]: path %q is given twice", i, sp.path)
		}
		seen[sp.path] = true
		specs = append(specs, sp)
	}
	return specs, nil
}

// parseInput checks one item of inputs.
func parseInput(item json.RawMessage) (sp inputSpec, err error) {
	var in inputArg
	dec := json.NewDecoder(bytes.NewReader(item))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return sp, fmt.Errorf(`want {"path": "rel/path", and one of "text", "base64" or "uri"}: %v`, strings.TrimPrefix(err.Error(), "json: "))
	}
	if in.Path == nil {
		return sp, errors.New(`missing "path": the file's path under /tmp/inputs, e.g. "data.csv"`)
	}
	if sp.path, err = checkInputPath(*in.Path); err != nil {
		return sp, err
	}
	n := 0
	for _, p := range []*string{in.Text, in.Base64, in.URI} {
		if p != nil {
			n++
		}
	}
	if n != 1 {
		return sp, fmt.Errorf(`%q: give exactly one of "text", "base64" or "uri", got %d`, sp.path, n)
	}
	switch {
	case in.Text != nil:
		sp.data, sp.source = []byte(*in.Text), "text"
	case in.Base64 != nil:
		sp.data, err = base64.StdEncoding.DecodeString(*in.Base64)
		if err != nil {
			return sp, fmt.Errorf("%q: base64 is not standard base64 (RFC 4648, with padding): %v", sp.path, err)
		}
		sp.source = "base64"
	default:
		if *in.URI == "" {
			return sp, fmt.Errorf("%q: uri is empty", sp.path)
		}
		sp.uri, sp.source = *in.URI, *in.URI
	}
	if in.Server != nil {
		if sp.uri == "" || strings.HasPrefix(sp.uri, artifacts.URIPrefix) {
			return sp, fmt.Errorf(`%q: "server" names the upstream server of a resource "uri", and goes only with one`, sp.path)
		}
		sp.server = *in.Server
	}
	return sp, nil
}

// checkInputPath returns p if it is a path the sandbox's inputs folder
// holds, else why not. Nothing may escape the folder: an absolute path, a
// ".." part or a backslash are refused, not cleaned.
func checkInputPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New(`path is empty: name the file, e.g. "data.csv" for /tmp/inputs/data.csv`)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("path %q is absolute: give it relative to /tmp/inputs, e.g. %q", p, strings.TrimLeft(path.Base(p), "/"))
	case strings.Contains(p, "\\"):
		return "", fmt.Errorf("path %q holds a backslash: separate folders with /", p)
	}
	for part := range strings.SplitSeq(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q escapes /tmp/inputs (a .. part): give a path inside it", p)
		}
	}
	if err := relay.CheckFileName(p); err != nil {
		return "", fmt.Errorf("path %q: %v", p, strings.TrimPrefix(err.Error(), "name "))
	}
	return p, nil
}

// clipJSON is raw for an error message, cut to 60 bytes.
func clipJSON(raw json.RawMessage) string {
	if len(raw) > 60 {
		return string(raw[:60]) + "..."
	}
	return string(raw)
}

// inputBounds are the limits on one call's inputs, with the setting that
// names each.
type inputBounds struct {
	policy.Inputs
	tmpfs int64 // the run's /tmp
}

// inputBounds are the policy's bounds on inputs, pinned to snap when
// there is one.
func (s *Server) inputBounds(pol *policy.Policy) inputBounds {
	if pol == nil {
		pol = policy.Default()
	}
	return inputBounds{Inputs: pol.Inputs, tmpfs: pol.Sandbox.TmpfsSize}
}

// resolveInputs turns a call's checked inputs into the files put in its
// sandbox, within the bounds: a bridge:// URI must be a file of a run of
// the same client (another client's is as unknown as one that never
// was); any other URI is an upstream server's resource, read through the
// proxy under the policy. Each is audited (path, size, source).
func (s *Server) resolveInputs(ctx context.Context, req *mcp.CallToolRequest, runID string, specs []inputSpec, b inputBounds) ([]sandbox.InputFile, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	if len(specs) > b.MaxFiles {
		if b.MaxFiles == 0 {
			return nil, errors.New("this bridge's policy takes no inputs (inputs.max_files is 0): have the code read the data from a mount or a tool instead")
		}
		return nil, fmt.Errorf("%d inputs, over the limit of %d (inputs.max_files): pass fewer files, or one archive of them", len(specs), b.MaxFiles)
	}
	files := make([]sandbox.InputFile, 0, len(specs))
	var total int64
	for _, sp := range specs {
		f, err := s.inputFile(ctx, req, runID, sp, b)
		if err != nil {
			return nil, err
		}
		total += f.Size
		if total > b.MaxBytes {
			return nil, fmt.Errorf("the inputs come to more than %s (inputs.max_bytes) at %q: pass less, or have the code read the rest from a tool or a mount", units.FormatSize(b.MaxBytes), sp.path)
		}
		if total > b.tmpfs {
			return nil, fmt.Errorf("the inputs come to more than the run's /tmp holds (%s, sandbox.tmpfs_size) at %q: pass less, or ask the operator for a larger sandbox.tmpfs_size", units.FormatSize(b.tmpfs), sp.path)
		}
		files = append(files, f)
	}
	if s.opts.Policy != nil {
		for i, f := range files {
			s.opts.Policy.Audit().Input(runID, f.Path, f.Size, specs[i].source)
		}
	}
	return files, nil
}

// inputFile is one input as a file to put, its size checked against the
// per-file bound.
func (s *Server) inputFile(ctx context.Context, req *mcp.CallToolRequest, runID string, sp inputSpec, b inputBounds) (sandbox.InputFile, error) {
	tooBig := func(size int64) error {
		return fmt.Errorf("input %q is %s, over the limit of %s for one file (inputs.max_file_bytes): pass a smaller file, or have the code read it from a tool or a mount",
			sp.path, units.FormatSize(size), units.FormatSize(b.MaxFileBytes))
	}
	if sp.uri == "" {
		if int64(len(sp.data)) > b.MaxFileBytes {
			return sandbox.InputFile{}, tooBig(int64(len(sp.data)))
		}
		data := sp.data
		return sandbox.InputFile{Path: sp.path, Size: int64(len(data)), Open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}}, nil
	}
	if strings.HasPrefix(sp.uri, artifacts.URIPrefix) {
		e, err := s.ownFile(req, sp.uri)
		if err != nil {
			return sandbox.InputFile{}, fmt.Errorf("input %q: %w", sp.path, err)
		}
		if e.Size > b.MaxFileBytes {
			return sandbox.InputFile{}, tooBig(e.Size)
		}
		uri, store := sp.uri, s.opts.Store
		return sandbox.InputFile{Path: sp.path, Size: e.Size, Open: func() (io.ReadCloser, error) {
			_, rc, err := store.Open(uri)
			return rc, err
		}}, nil
	}
	if strings.HasPrefix(sp.uri, "sandbox:") {
		return sandbox.InputFile{}, fmt.Errorf("input %q: %s came back inline, in that result: pass its content as text or base64 (files handed back by reference, with a bridge:// URI, can be passed by URI)", sp.path, sp.uri)
	}
	return s.upstreamInput(ctx, runID, sp, b.MaxFileBytes)
}

// ownFile is the stored file uri if the call's principal made it.
func (s *Server) ownFile(req *mcp.CallToolRequest, uri string) (artifacts.Entry, error) {
	notFound := fmt.Errorf("%s is not a file your runs handed back, or it is no longer kept: pass a URI from an earlier result's artifacts", uri)
	if s.opts.Store == nil {
		return artifacts.Entry{}, fmt.Errorf("%s: this bridge keeps no files by reference (the policy sets no artifacts.dir), so there is none to pass", uri)
	}
	run, _, err := artifacts.ParseURI(uri)
	if err != nil {
		return artifacts.Entry{}, err
	}
	if !s.owners.owns(s.principal(req), run) {
		return artifacts.Entry{}, notFound
	}
	e, rc, err := s.opts.Store.Open(uri)
	if err != nil {
		return artifacts.Entry{}, notFound
	}
	rc.Close()
	return e, nil
}

// ResourceReader reads an upstream server's resource for a run, as the
// run's code would: under the policy, counted in the run's budget,
// audited. *[toolhost.Resources] is the real one.
type ResourceReader interface {
	ReadResource(ctx context.Context, runID, server, uri string, limit int64) (toolhost.ResourceData, error)
}

// upstreamInput reads an upstream server's resource as an input: whole,
// within the per-file bound and the policy's resources.max_bytes, before
// the run's container is touched.
func (s *Server) upstreamInput(ctx context.Context, runID string, sp inputSpec, limit int64) (sandbox.InputFile, error) {
	if s.opts.Resources == nil {
		return sandbox.InputFile{}, fmt.Errorf("input %q: %s is not a bridge:// URI of a file an earlier run handed back, and this bridge has no upstream servers whose resources it could read", sp.path, sp.uri)
	}
	d, err := s.opts.Resources.ReadResource(ctx, runID, sp.server, sp.uri, limit)
	if err != nil {
		return sandbox.InputFile{}, fmt.Errorf("input %q: reading %s: %w", sp.path, sp.uri, err)
	}
	data := d.Data
	return sandbox.InputFile{Path: sp.path, Size: int64(len(data)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}, nil
}
