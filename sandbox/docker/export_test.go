package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/docker/docker/api/types/container"
)

// fakeExportAPI is the part of Docker's API that Export uses, on a unix
// socket: it records the calls, and fails the export when exportFails.
type fakeExportAPI struct {
	exportFails bool
	mu          sync.Mutex
	calls       []string
	created     container.Config
}

func (f *fakeExportAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if i := strings.Index(path[1:], "/"); strings.HasPrefix(path, "/v1.") && i > 0 {
		path = path[i+1:]
	}
	f.mu.Lock()
	f.calls = append(f.calls, r.Method+" "+path)
	f.mu.Unlock()
	w.Header().Set("Api-Version", "1.43")
	switch {
	case path == "/_ping":
		io.WriteString(w, "OK")
	case path == "/version":
		io.WriteString(w, `{"Version":"test"}`)
	case path == "/images/missing/json":
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"message":"No such image: missing"}`)
	case strings.HasPrefix(path, "/images/"):
		io.WriteString(w, `{"Id":"sha256:1","Config":{"Env":["PATH=/usr/bin","LANG=C.UTF-8"]}}`)
	case path == "/containers/create":
		f.mu.Lock()
		err := json.NewDecoder(r.Body).Decode(&f.created)
		f.mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"Id":"c1","Warnings":[]}`)
	case path == "/containers/c1/export":
		if f.exportFails {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"message":"disk on fire"}`)
			return
		}
		tw := tar.NewWriter(w)
		tw.WriteHeader(&tar.Header{Name: "opt/bridge/runner.py", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		tw.Write([]byte("hi"))
		tw.Close()
	case r.Method == http.MethodDelete && path == "/containers/c1":
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"message":"not faked: `+r.Method+` `+path+`"}`)
	}
}

func (f *fakeExportAPI) saw(call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.calls, call)
}

func newFakeExport(t *testing.T, f *fakeExportAPI) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	d, err := New(context.Background(), "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// Export creates a container it never starts, streams its export, returns
// the image's ENV, and removes the container, also when the export fails.
func TestDockerExport(t *testing.T) {
	ctx := context.Background()
	f := &fakeExportAPI{}
	d := newFakeExport(t, f)
	var buf bytes.Buffer
	env, err := d.Export(ctx, "runner:1", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env, []string{"PATH=/usr/bin", "LANG=C.UTF-8"}) {
		t.Errorf("env %q", env)
	}
	hdr, err := tar.NewReader(&buf).Next()
	if err != nil || hdr.Name != "opt/bridge/runner.py" {
		t.Errorf("the tar stream: %v %v", hdr, err)
	}
	if f.created.Image != "runner:1" || !slices.Equal(f.created.Entrypoint, []string{exportEntrypoint}) || !f.created.NetworkDisabled {
		t.Errorf("created %+v", f.created)
	}
	if !f.saw("DELETE /containers/c1") {
		t.Errorf("not removed: %q", f.calls)
	}
	for _, c := range f.calls {
		if strings.HasSuffix(c, "/start") {
			t.Errorf("started: %q", f.calls)
		}
	}

	f = &fakeExportAPI{exportFails: true}
	d = newFakeExport(t, f)
	if _, err := d.Export(ctx, "runner:1", io.Discard); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("a failed export: %v", err)
	}
	if !f.saw("DELETE /containers/c1") {
		t.Errorf("not removed after a failed export: %q", f.calls)
	}

	f = &fakeExportAPI{}
	d = newFakeExport(t, f)
	if _, err := d.Export(ctx, "missing", io.Discard); !errors.Is(err, sandbox.ErrImageNotFound) {
		t.Errorf("a missing image: %v", err)
	}
	if f.saw("POST /containers/create") {
		t.Errorf("created a container of a missing image: %q", f.calls)
	}
}
