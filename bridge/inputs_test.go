package bridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// inputsSeen is an Instances whose instances read the inputs each Exec
// gets, as the sandbox would, and may hand a file back.
type inputsSeen struct {
	mu   sync.Mutex
	got  []map[string]string // per Exec: path → content
	hand []byte              // handed back as big.bin, when set
}

// instances returns an Instances whose Exec records x.Inputs.
func (f *inputsSeen) instances() Instances { return inputsInstances{f} }

type inputsInstances struct{ f *inputsSeen }

func (i inputsInstances) Acquire(_ context.Context, _ sandbox.Limits, _ string) (sandbox.Instance, error) {
	return inputsInstance(i), nil
}

type inputsInstance struct{ f *inputsSeen }

func (i inputsInstance) Exec(_ context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	if err := sandbox.CheckInputs(x.Inputs); err != nil {
		return sandbox.Result{}, err
	}
	m := map[string]string{}
	for _, in := range x.Inputs {
		rc, err := in.Open()
		if err != nil {
			return sandbox.Result{}, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || int64(len(b)) != in.Size {
			return sandbox.Result{}, err
		}
		m[in.Path] = string(b)
	}
	i.f.mu.Lock()
	i.f.got = append(i.f.got, m)
	hand := i.f.hand
	i.f.mu.Unlock()
	if hand != nil {
		sendFile(x.Sink, "big.bin", hand)
	}
	return sandbox.Result{RunID: x.RunID, Status: sandbox.StatusOK}, nil
}
func (inputsInstance) Kept() bool                  { return false }
func (inputsInstance) Closed() bool                { return false }
func (inputsInstance) Close(context.Context) error { return nil }

func TestInputsByValue(t *testing.T) {
	f := &inputsSeen{}
	s := newServer(t, Options{Instances: f.instances()})
	cs := connect(t, s, nil)
	res, out := call(t, cs, map[string]any{"code": "x", "inputs": []any{
		map[string]any{"path": "a.txt", "text": "héllo"},
		map[string]any{"path": "d/b.bin", "base64": base64.StdEncoding.EncodeToString([]byte{0, 1, 2})},
		map[string]any{"path": "empty", "text": ""},
	}})
	if res.IsError || out.Status != "ok" {
		t.Fatalf("got %q %+v", text(res), out)
	}
	want := map[string]string{"a.txt": "héllo", "d/b.bin": "\x00\x01\x02", "empty": ""}
	if len(f.got) != 1 || len(f.got[0]) != 3 {
		t.Fatalf("the sandbox got %v, want %v", f.got, want)
	}
	for k, v := range want {
		if f.got[0][k] != v {
			t.Errorf("input %s = %q, want %q", k, f.got[0][k], v)
		}
	}
}

func TestInputsRefused(t *testing.T) {
	f := &inputsSeen{}
	s := newServer(t, Options{Instances: f.instances()})
	cs := connect(t, s, nil)
	tests := []struct {
		name   string
		inputs any
		want   string
	}{
		{"not a list", map[string]any{"path": "a"}, "inputs must be a list"},
		{"item not an object", []any{"a.txt"}, "inputs[0]: want"},
		{"unknown key", []any{map[string]any{"path": "a", "text": "x", "mode": 1}}, `unknown field "mode"`},
		{"no path", []any{map[string]any{"text": "x"}}, `missing "path"`},
		{"two sources", []any{map[string]any{"path": "a", "text": "x", "base64": "eA=="}}, "exactly one of"},
		{"no source", []any{map[string]any{"path": "a"}}, "exactly one of"},
		{"absolute", []any{map[string]any{"path": "/etc/passwd", "text": "x"}}, "is absolute"},
		{"dot dot", []any{map[string]any{"path": "a/../../etc/x", "text": "x"}}, "escapes /tmp/inputs"},
		{"dot dot alone", []any{map[string]any{"path": "..", "text": "x"}}, "escapes /tmp/inputs"},
		{"backslash", []any{map[string]any{"path": "..\\x", "text": "x"}}, "backslash"},
		{"empty part", []any{map[string]any{"path": "a//b", "text": "x"}}, "empty, . or .. part"},
		{"NUL", []any{map[string]any{"path": "a\x00b", "text": "x"}}, "NUL"},
		{"twice", []any{map[string]any{"path": "a", "text": "x"}, map[string]any{"path": "a", "text": "y"}}, "given twice"},
		{"bad base64", []any{map[string]any{"path": "a", "base64": "!!"}}, "not standard base64"},
		{"empty uri", []any{map[string]any{"path": "a", "uri": ""}}, "uri is empty"},
		{"too many", manyInputs(21), "21 inputs, over the limit of 20 (inputs.max_files)"},
		{"bridge uri without a store", []any{map[string]any{"path": "a", "uri": "bridge://runs/abc/x.csv"}}, "keeps no files by reference"},
		{"inline uri", []any{map[string]any{"path": "a", "uri": "sandbox:///tmp/outputs/x.csv"}}, "came back inline"},
		{"upstream uri", []any{map[string]any{"path": "a", "uri": "file:///etc/passwd"}}, "has no upstream servers whose resources it could read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := call(t, cs, map[string]any{"code": "x", "inputs": tt.inputs})
			if !res.IsError || out.Status != "invalid" || !strings.Contains(text(res), tt.want) {
				t.Fatalf("status %q, text %q; want invalid saying %q", out.Status, text(res), tt.want)
			}
		})
	}
	if len(f.got) != 0 {
		t.Fatalf("refused inputs reached the sandbox: %v", f.got)
	}
}

// TestInputsBounds: the policy's bounds, the run's /tmp, and the audit
// (path, size, source; never the content).
func TestInputsBounds(t *testing.T) {
	dir := t.TempDir()
	file, audit := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.jsonl")
	body := "version: 1\naudit:\n  file: " + audit + "\nsandbox:\n  tmpfs_size: 1Mi\ninputs:\n  max_files: 3\n  max_file_bytes: 600Ki\n  max_bytes: 4Mi\n"
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f := &inputsSeen{}
	cs := connect(t, newServer(t, Options{Policy: store, Instances: f.instances()}), nil)
	kib := func(n int) string { return strings.Repeat("s", n<<10) }
	for _, tt := range []struct {
		name   string
		inputs []any
		want   string
	}{
		{"too many", manyInputs(4), "4 inputs, over the limit of 3 (inputs.max_files)"},
		{"one too big", []any{map[string]any{"path": "a", "text": kib(601)}}, "input \"a\" is 601Ki, over the limit of 600Ki for one file (inputs.max_file_bytes)"},
		{"over /tmp", []any{map[string]any{"path": "a", "text": kib(500)}, map[string]any{"path": "b", "text": kib(600)}},
			"more than the run's /tmp holds (1Mi, sandbox.tmpfs_size) at \"b\""},
	} {
		res, out := call(t, cs, map[string]any{"code": "x", "inputs": tt.inputs})
		if !res.IsError || out.Status != "invalid" || !strings.Contains(text(res), tt.want) {
			t.Errorf("%s: status %q, text %q; want invalid saying %q", tt.name, out.Status, text(res), tt.want)
		}
	}
	res, _ := call(t, cs, map[string]any{"code": "x", "inputs": []any{map[string]any{"path": "secret.txt", "text": "TOP-SECRET-CONTENT"}}})
	if res.IsError {
		t.Fatalf("an input within bounds: %q", text(res))
	}
	if len(f.got) != 1 {
		t.Fatalf("%d runs reached the sandbox, want the one within bounds", len(f.got))
	}
	log, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"event":"input"`) || !strings.Contains(string(log), `"path":"secret.txt","bytes":18,"source":"text"`) {
		t.Errorf("no input record in the audit log:\n%s", log)
	}
	if strings.Contains(string(log), "TOP-SECRET") || strings.Count(string(log), `"event":"input"`) != 1 {
		t.Errorf("the audit log holds an input's content, or refused inputs:\n%s", log)
	}
}

func manyInputs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"path": "f" + strings.Repeat("x", i), "text": "x"}
	}
	return out
}

// TestInputsChainedByURI: a file one run handed back by reference is the
// next run's input by its URI, for the client that made it only.
func TestInputsChainedByURI(t *testing.T) {
	store, err := artifacts.OpenStore(artifacts.StoreOptions{Dir: t.TempDir(), Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	big := bytes.Repeat([]byte("0123456789abcdef"), 128<<10) // 2 MiB: by reference
	f := &inputsSeen{hand: big}
	s := newServer(t, Options{Store: store, Instances: f.instances()})
	owner, other := connect(t, s, nil), connectAs(t, s, "other", nil)
	res, out := call(t, owner, map[string]any{"code": "x"})
	if res.IsError || len(out.Artifacts) != 1 || !strings.HasPrefix(out.Artifacts[0].URI, "bridge://runs/") {
		t.Fatalf("the first run handed back %+v (%q)", out.Artifacts, text(res))
	}
	uri := out.Artifacts[0].URI
	f.hand = nil
	res, out = call(t, owner, map[string]any{"code": "x", "inputs": []any{map[string]any{"path": "in/big.bin", "uri": uri}}})
	if res.IsError || out.Status != "ok" {
		t.Fatalf("chaining %s: %q", uri, text(res))
	}
	if got := f.got[len(f.got)-1]["in/big.bin"]; got != string(big) {
		t.Fatalf("the second run got %d bytes, want the %d handed back", len(got), len(big))
	}
	// Another principal: as unknown as a file that never was.
	res, _ = call(t, other, map[string]any{"code": "x", "inputs": []any{map[string]any{"path": "x", "uri": uri}}})
	if !res.IsError || !strings.Contains(text(res), "is not a file your runs handed back") {
		t.Fatalf("another principal's file: %q", text(res))
	}
	res, _ = call(t, owner, map[string]any{"code": "x", "inputs": []any{map[string]any{"path": "x", "uri": strings.TrimSuffix(uri, "big.bin") + "nope.bin"}}})
	if !res.IsError || !strings.Contains(text(res), "is not a file your runs handed back") {
		t.Fatalf("a file never handed back: %q", text(res))
	}
}
