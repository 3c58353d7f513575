package integration

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// exporter is the part of the docker and podman engines the runsc engine
// takes its root file systems from (runsc.Exporter).
type exporter interface {
	Export(ctx context.Context, ref string, w io.Writer) ([]string, error)
}

// TestEngineExport exports the runner image from each engine, as the runsc
// engine does: a tar stream that holds the runner (/opt/bridge), and the
// image's ENV.
func TestEngineExport(t *testing.T) {
	forEngines(t, only("the runsc engine takes its images from Docker or Podman, by their Export", kindDocker, kindPodman), func(t *testing.T, e *engine) {
		exp, ok := e.rt.(exporter)
		if !ok {
			t.Fatalf("%s has no Export", e.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pr, pw := io.Pipe()
		var env []string
		done := make(chan error, 1)
		go func() {
			var err error
			env, err = exp.Export(ctx, imageName(), pw)
			pw.CloseWithError(err)
			done <- err
		}()
		tr := tar.NewReader(pr)
		found, n := false, 0
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading the export: %v", err)
			}
			n++
			found = found || strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "./") == "opt/bridge"
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		t.Logf("%d entries, env %q", n, env)
		if !found {
			t.Errorf("no opt/bridge in the export of %s", imageName())
		}
		if !strings.Contains(strings.Join(env, "\n"), "PATH=") {
			t.Errorf("the image's ENV lacks PATH: %q", env)
		}
	})
}
