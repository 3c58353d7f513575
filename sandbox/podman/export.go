package podman

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/specgen"
)

// exportEntrypoint is the command of the container Export creates: it is
// never started, and a path that is nowhere says so should it ever be.
const exportEntrypoint = "/nonexistent/bridge-export-never-runs"

// exportSpec is the container Export creates of image ref: named so that
// whoever finds one a crash left behind knows it, with no network.
func exportSpec(ref string) *specgen.SpecGenerator {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s := specgen.NewSpecGenerator(ref, false)
	s.RawImageName = ref
	s.Name = "bridge-export-" + hex.EncodeToString(b)
	s.Entrypoint = []string{exportEntrypoint}
	s.Command = []string{}
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	return s
}

// Export writes the file system of image ref to w as a tar stream and
// returns the image's environment (its ENV): what the runsc engine
// (sandbox/runsc's Exporter) makes a bundle's root of. The service exports
// containers, not images, so Export creates one of the image without
// starting it, exports it, and removes it on every path.
func (p *Client) Export(ctx context.Context, ref string, w io.Writer) (env []string, err error) {
	img, err := images.GetImage(p.call(ctx), ref, nil)
	if err != nil {
		if podmanAPICode(err) == http.StatusNotFound || podmanAPICause(err) == "image not known" {
			return nil, fmt.Errorf("podman: %w: %s is not in the local storage of %s", sandbox.ErrImageNotFound, ref, p.path)
		}
		return nil, p.wrap(ctx, fmt.Sprintf("inspecting image %q", ref), err)
	}
	if img != nil && img.ImageData != nil && img.Config != nil {
		env = slices.Clone(img.Config.Env)
	}
	resp, err := containers.CreateWithSpec(p.call(ctx), exportSpec(ref), nil)
	if err != nil {
		return nil, p.wrap(ctx, "creating a container of "+ref+" to export it", err)
	}
	defer func() {
		// Removed even when ctx ended: the container is ours to clean.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := p.Remove(rctx, resp.ID); rerr != nil && err == nil {
			err = fmt.Errorf("podman: exporting %s: %w", ref, rerr)
		}
	}()
	if err := containers.Export(p.call(ctx), resp.ID, w, nil); err != nil {
		return nil, p.wrap(ctx, "exporting container "+resp.ID+" of "+ref, err)
	}
	return env, nil
}
