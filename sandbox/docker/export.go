package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// exportEntrypoint is the command of the container Export creates: it is
// never started, and a path that is nowhere says so should it ever be.
const exportEntrypoint = "/nonexistent/bridge-export-never-runs"

// exportName is a fresh name for Export's container, that says what it is
// to whoever finds one a crash left behind.
func exportName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "bridge-export-" + hex.EncodeToString(b)
}

// Export writes the file system of image ref to w as a tar stream and
// returns the image's environment (its ENV): what the runsc engine
// (sandbox/runsc's Exporter) makes a bundle's root of. Docker exports
// containers, not images, so Export creates one of the image without
// starting it (with a command that is nowhere and no network), exports it,
// and removes it on every path.
func (d *Client) Export(ctx context.Context, ref string, w io.Writer) (env []string, err error) {
	img, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s is not in the local image store of %s", sandbox.ErrImageNotFound, ref, d.host)
		}
		return nil, d.wrap(err, "inspect image "+ref)
	}
	if img.Config != nil {
		env = slices.Clone(img.Config.Env)
	}
	cfg := &container.Config{Image: ref, Entrypoint: []string{exportEntrypoint}, Cmd: []string{}, NetworkDisabled: true}
	resp, err := d.cli.ContainerCreate(ctx, cfg, &container.HostConfig{NetworkMode: "none"}, nil, nil, exportName())
	if err != nil {
		return nil, d.wrap(err, "create a container of "+ref+" to export it")
	}
	defer func() {
		// Removed even when ctx ended: the container is ours to clean.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := d.Remove(rctx, resp.ID); rerr != nil && err == nil {
			err = fmt.Errorf("export %s: %w", ref, rerr)
		}
	}()
	rc, err := d.cli.ContainerExport(ctx, resp.ID)
	if err != nil {
		return nil, d.wrapContainer(err, "export", resp.ID)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return nil, fmt.Errorf("export %s (container %s): %w", ref, resp.ID, err)
	}
	return env, nil
}
