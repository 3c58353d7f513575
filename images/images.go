// Package images names and builds the runner image: the small Python image
// every run starts from. Its tag is a hash of its build context, so a bridge
// only ever runs the runner it was built with.
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	assets "github.com/bridge-mcp/bridge"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Repository is the name of the runner image, without its tag.
const Repository = "localhost/bridge-runner"

// Name returns the runner image reference this binary runs:
// Repository:<first 12 hex digits of the build context's SHA-256>.
func Name() string {
	return Repository + ":" + contextHash(assets.RunnerContext)
}

// MissingHint says what to do about image missing from the local store of
// engine ("docker" or "podman"). `bridge image build` makes only Name, so
// for any other image it says so, and what would: the engine itself, or
// the built-in runner instead. It fits sandbox.ExecutorOptions.ImageHint.
func MissingHint(image, engine string) string {
	if image == Name() {
		return "build it with `bridge image build --runtime " + engine + "`"
	}
	return fmt.Sprintf("%s is not an image `bridge image build` makes (it makes only %s): "+
		"pull or build %s yourself with %s (`%s pull` / `%s build -t %s DIR`), "+
		"or drop --image (sandbox.image in a policy) to use the built-in runner, which `bridge image build --runtime %s` makes",
		image, Name(), image, engine, engine, engine, image, engine)
}

// RebuildHint says what to do about image when it is present but does not
// work as the bridge's runner (doctor's smoke run failed in it).
func RebuildHint(image, engine string) string {
	if image == Name() {
		return "rebuild it with `bridge image build --runtime " + engine + "`"
	}
	return fmt.Sprintf("%s is not an image `bridge image build` makes, so it must carry this bridge's runner itself: "+
		"build it FROM %s, or drop --image (sandbox.image in a policy) to use the built-in runner", image, Name())
}

func contextHash(fsys fs.FS) string {
	var paths []string
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		b, _ := fs.ReadFile(fsys, p)
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// WriteContext writes the runner's build context into dir.
func WriteContext(dir string) error {
	return fs.WalkDir(assets.RunnerContext, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := fs.ReadFile(assets.RunnerContext, p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// Build builds the runner image through rt, streaming the build log to out,
// and returns the image reference.
func Build(ctx context.Context, rt sandbox.Runtime, out io.Writer) (string, error) {
	dir, err := os.MkdirTemp("", "bridge-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := WriteContext(dir); err != nil {
		return "", fmt.Errorf("writing build context: %w", err)
	}
	name := Name()
	if err := rt.BuildImage(ctx, sandbox.BuildOptions{ContextDir: dir, Dockerfile: assets.RunnerDockerfile, Tag: name, Out: out}); err != nil {
		return "", fmt.Errorf("building %s with %s: %w", name, rt.Name(), err)
	}
	return name, nil
}
