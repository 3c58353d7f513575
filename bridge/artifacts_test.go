package bridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/sandbox"
)

// tinyPNG is a 1x1 PNG.
var tinyPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

// sendFile hands one whole file to the run's Sink, as the sandbox does.
func sendFile(sink sandbox.Sink, name string, data []byte) {
	w := sink.File(sandbox.FileInfo{Name: name, Size: int64(len(data))})
	_, _ = w.Write(data)
	w.End(nil)
}

func TestArtifactsReturned(t *testing.T) {
	store, err := artifacts.OpenStore(artifacts.StoreOptions{Dir: t.TempDir(), Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	big := bytes.Repeat([]byte{0, 1, 2, 3}, 512<<10) // 2 MiB: over the inline limit
	var limits sandbox.FileLimits
	s := newServer(t, Options{Store: store, Instances: withRunner(func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		limits = req.Files
		req.Sink.Output("stdout", "done\n")
		sendFile(req.Sink, "plots/sine.png", tinyPNG)
		sendFile(req.Sink, "data.csv", []byte("x,y\n1,2\n"))
		sendFile(req.Sink, "big.bin", big)
		req.Sink.Skipped(sandbox.FileInfo{Name: "passwd"}, sandbox.SkipSymlink)
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK, Stdout: "done\n", FilesSkipped: 3}, nil
	})})
	cs := connect(t, s, nil)
	res, out := call(t, cs, map[string]any{"code": "x"})
	if res.IsError || out.Status != "ok" {
		t.Fatalf("got %+v", out)
	}
	if limits.MaxFiles != 20 || limits.MaxFileBytes < int64(len(big)) {
		t.Errorf("the run was told file limits %+v", limits)
	}
	if len(res.Content) != 4 {
		t.Fatalf("%d content items, want text, image, resource, link: %+v", len(res.Content), res.Content)
	}
	txt := res.Content[0].(*mcp.TextContent).Text
	for _, want := range []string{"done\n[files: plots/sine.png (image/png, ", "data.csv (text/csv, 8 bytes)", "big.bin (application/octet-stream, 2 MiB by reference)",
		"[not returned: passwd (0 bytes): a symbolic link", "; 3 more (structuredContent.artifacts lists them)]"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text %q lacks %q", txt, want)
		}
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, tinyPNG) {
		t.Errorf("content 1 = %#v, want the PNG", res.Content[1])
	}
	if r, ok := res.Content[2].(*mcp.EmbeddedResource); !ok || r.Resource.MIMEType != "text/csv" || r.Resource.Text != "x,y\n1,2\n" || r.Resource.URI != "sandbox:///tmp/outputs/data.csv" {
		t.Errorf("content 2 = %#v, want the CSV as text", res.Content[2])
	}
	link, ok := res.Content[3].(*mcp.ResourceLink)
	if !ok || !strings.HasPrefix(link.URI, "bridge://runs/") || link.Size == nil || *link.Size != int64(len(big)) {
		t.Fatalf("content 3 = %#v, want a resource link", res.Content[3])
	}
	if len(out.Artifacts) != 4 || out.ArtifactsUnlisted != 3 || out.Artifacts[3].Note == "" || out.Artifacts[2].URI != link.URI || out.Artifacts[0].Inlined != true {
		t.Errorf("structuredContent.artifacts = %+v, unlisted %d", out.Artifacts, out.ArtifactsUnlisted)
	}

	// The session that made it lists and reads it back.
	ctx := context.Background()
	list, err := cs.ListResources(ctx, nil)
	if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != link.URI || list.Resources[0].Size != int64(len(big)) {
		t.Fatalf("resources/list = %+v, %v", list, err)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(rr.Contents) != 1 || !bytes.Equal(rr.Contents[0].Blob, big) {
		t.Fatalf("resources/read: %v", err)
	}
	// The same principal's next connection lists it too; another
	// principal neither lists nor reads it.
	if l, err := connect(t, s, nil).ListResources(ctx, nil); err != nil || len(l.Resources) != 1 {
		t.Errorf("the principal's next connection lists %+v, %v", l, err)
	}
	other := connectAs(t, s, "other", nil)
	if l, err := other.ListResources(ctx, nil); err != nil || len(l.Resources) != 0 {
		t.Errorf("another principal lists %+v, %v", l, err)
	}
	if _, err := other.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("another principal read another's file: %v", err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "bridge://runs/x/../../etc/passwd"}); err == nil {
		t.Errorf("a path out of the store was read")
	}
}

func TestNoArtifactsNoChange(t *testing.T) {
	s := newServer(t, Options{Instances: withRunner(func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK}, nil
	})})
	res, out := call(t, connect(t, s, nil), map[string]any{"code": "x"})
	if len(res.Content) != 1 || text(res) != "(no output)" || out.Artifacts != nil {
		t.Errorf("got %+v, %+v", res.Content, out)
	}
}

// The bridge remembers the owner of a run's stored files only while the
// store holds some of them: however many runs stored files, the map holds
// the runs with live files.
func TestArtifactOwnersAreForgotten(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store, err := artifacts.OpenStore(artifacts.StoreOptions{Dir: t.TempDir(), Expiry: time.Minute, Now: clock, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	big := bytes.Repeat([]byte("z"), 2<<20) // over the inline limit: stored
	s := newServer(t, Options{Store: store, Instances: withRunner(func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		sendFile(req.Sink, "big.bin", big)
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK}, nil
	})})
	cs := connect(t, s, nil)
	for range 5 {
		call(t, cs, map[string]any{"code": "x"})
		mu.Lock()
		now = now.Add(2 * time.Minute) // each run's files expire before the next
		mu.Unlock()
	}
	s.owners.mu.Lock()
	n := len(s.owners.runs)
	s.owners.mu.Unlock()
	if n != 1 {
		t.Errorf("the bridge remembers the owners of %d runs, want 1 (the last)", n)
	}
}

// A stored file over the read limit is refused with an error that says
// what to do, before it is read; one within it is read.
func TestArtifactReadBounded(t *testing.T) {
	dir := t.TempDir()
	store, err := artifacts.OpenStore(artifacts.StoreOptions{Dir: dir, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lim := artifacts.DefaultLimits()
	lim.MaxBytesRead = 1 << 20
	s := newServer(t, Options{Store: store, Artifacts: lim, Instances: withRunner(func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		sendFile(req.Sink, "small.bin", bytes.Repeat([]byte{1}, 2<<20-1))
		sendFile(req.Sink, "large.bin", bytes.Repeat([]byte{2}, 3<<20))
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK}, nil
	})})
	cs := connect(t, s, nil)
	_, out := call(t, cs, map[string]any{"code": "x"})
	if len(out.Artifacts) != 2 || out.Artifacts[0].URI == "" || out.Artifacts[1].URI == "" {
		t.Fatalf("artifacts %+v", out.Artifacts)
	}
	ctx := context.Background()
	for i, want := range []string{"over the limit of 1Mi", "over the limit of 1Mi"} {
		_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: out.Artifacts[i].URI})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("reading %s: %v, want an error saying %q and where the file is", out.Artifacts[i].Name, err, want)
		}
	}
	lim.MaxBytesRead = 2 << 20
	s.opts.Artifacts = lim
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: out.Artifacts[0].URI})
	if err != nil || len(rr.Contents) != 1 || len(rr.Contents[0].Blob)+len(rr.Contents[0].Text) != 2<<20-1 {
		t.Fatalf("a file within the limit: %v (%d contents, %d bytes blob, %d text)", err, len(rr.Contents), len(rr.Contents[0].Blob), len(rr.Contents[0].Text))
	}
}
