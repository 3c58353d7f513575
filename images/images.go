// Package images names and builds the runner images: the small Python
// images every run starts from. Each variant is a build target of
// Dockerfile.runner, and its tag is a hash of the build context, so a
// bridge only ever runs the runner it was built with. A custom image adds
// an operator's Debian packages and Python wheels to a variant (Custom).
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	assets "github.com/bridge-mcp/bridge"
	"github.com/bridge-mcp/bridge/internal/suggest"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Repository is the name of the runner images, without their tags.
const Repository = "localhost/bridge-runner"

// The variants: build targets of Dockerfile.runner.
const (
	// Slim is Debian's python3 and the runner, nothing else: the default.
	Slim = "slim"
	// DataScience is Slim plus Debian's numpy, pandas, matplotlib, scipy,
	// scikit-learn, Pillow, openpyxl, tabulate and Jinja2.
	DataScience = "datascience"
)

// Variants lists the variants, the default first.
func Variants() []string { return []string{Slim, DataScience} }

// Label keys every runner image carries (Dockerfile.runner).
const (
	// LabelProtocol is the relay protocol the image's runner speaks
	// (docs/protocol.md). An image without it has no bridge runner.
	LabelProtocol = "io.github.bridge-mcp.relay-protocol"
	// LabelVariant is slim, datascience or custom.
	LabelVariant = "io.github.bridge-mcp.variant"
)

// CheckVariant says what is wrong with a variant name, or nil.
func CheckVariant(v string) error {
	for _, k := range Variants() {
		if v == k {
			return nil
		}
	}
	msg := fmt.Sprintf("%q is not a variant: want one of %s", v, strings.Join(Variants(), ", "))
	if s := suggest.Key(v, Variants()); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return fmt.Errorf("%s", msg)
}

// Name returns the reference of the default variant's image (Slim):
// Repository:<first 12 hex digits of the build context's SHA-256>.
func Name() string { return NameOf(Slim) }

// NameOf returns the reference of a variant's image: Name() for Slim,
// Repository:<variant>-<12 hex digits> for the others, hashing the build
// context and the variant. A name CheckVariant refuses gets a reference
// too, which no build makes.
func NameOf(variant string) string {
	h := sha256.New()
	hashFS(h, assets.RunnerContext)
	if variant == Slim {
		return Repository + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	}
	fmt.Fprintf(h, "target\x00%s\x00", variant)
	return Repository + ":" + variant + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// IsBuilt reports whether image is one `bridge image build` makes from this
// binary's build context: a variant's.
func IsBuilt(image string) (variant string, ok bool) {
	for _, v := range Variants() {
		if image == NameOf(v) {
			return v, true
		}
	}
	return "", false
}

// buildCommand is the command that builds image for engine, "" if no
// `bridge image build` makes it.
func buildCommand(image, engine string) string {
	v, ok := IsBuilt(image)
	if !ok {
		return ""
	}
	cmd := "bridge image build --runtime " + engine
	if v != Slim {
		cmd += " --variant " + v
	}
	return cmd
}

// MissingHint says what to do about image missing from the local store of
// engine ("docker" or "podman"). `bridge image build` makes the variants'
// images, so for any other image it says so, and what would: the engine
// itself, or a built-in runner instead. It fits
// sandbox.ExecutorOptions.ImageHint.
func MissingHint(image, engine string) string {
	if engine == "kubernetes" {
		// A cluster builds nothing and pulls nothing: the node's runtime
		// takes an image built beside it.
		return fmt.Sprintf("build it on the node with `bridge image build --runtime docker` (or podman; add the same --variant), "+
			"then import it into the node's container runtime: `docker save %s | ctr -n k8s.io images import -`", image)
	}
	if cmd := buildCommand(image, engine); cmd != "" {
		return "build it with `" + cmd + "`"
	}
	if strings.HasPrefix(image, Repository+":"+customPrefix) {
		return fmt.Sprintf("%s is a custom image (`bridge image build --apt ... --wheels ...`) that %s does not hold: "+
			"build it again for %s with the same --variant, --apt and --wheels (`bridge image build --runtime %s ...`, "+
			"which prints its name), or drop --image (sandbox.image in a policy) to use a built-in runner",
			image, engine, engine, engine)
	}
	return fmt.Sprintf("%s is not an image `bridge image build` makes (it makes only %s): "+
		"pull or build %s yourself with %s (`%s pull` / `%s build -t %s DIR`), "+
		"or drop --image (sandbox.image in a policy) to use the built-in runner, which `bridge image build --runtime %s` makes",
		image, Name(), image, engine, engine, engine, image, engine)
}

// RebuildHint says what to do about image when it is present but does not
// work as the bridge's runner (doctor's smoke run failed in it).
func RebuildHint(image, engine string) string {
	if cmd := buildCommand(image, engine); cmd != "" {
		return "rebuild it with `" + cmd + "`"
	}
	if strings.HasPrefix(image, Repository+":"+customPrefix) {
		return fmt.Sprintf("%s is a custom image, perhaps of another bridge's runner: build it again with this bridge "+
			"(`bridge image build --runtime %s` with the same --variant, --apt and --wheels) and select the name it prints", image, engine)
	}
	return fmt.Sprintf("%s is not an image `bridge image build` makes, so it must carry this bridge's runner itself: "+
		"build it FROM %s, or drop --image (sandbox.image in a policy) to use the built-in runner", image, Name())
}

// NoRunnerHint says what to do about an image with no bridge runner at all
// (no LabelProtocol): build it from a runner image.
func NoRunnerHint() string {
	return fmt.Sprintf("build it FROM %s (slim) or %s (datascience), which `bridge image build` makes, so that it carries the runner; "+
		"or drop --image (sandbox.image in a policy) to run a built-in runner; to add packages to one, "+
		"`bridge image build --apt PKG --wheels DIR` builds that image for you (docs/images.md)",
		Name(), NameOf(DataScience))
}

// hashFS writes every file of fsys, sorted by path, into h.
func hashFS(h hash.Hash, fsys fs.FS) {
	var paths []string
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return err
	})
	sort.Strings(paths)
	for _, p := range paths {
		b, _ := fs.ReadFile(fsys, p)
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
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

// Build builds a variant's image through rt, streaming the build log to
// out, and returns the image reference.
func Build(ctx context.Context, rt sandbox.Images, variant string, out io.Writer) (string, error) {
	if err := CheckVariant(variant); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "bridge-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := WriteContext(dir); err != nil {
		return "", fmt.Errorf("writing build context: %w", err)
	}
	name := NameOf(variant)
	err = rt.BuildImage(ctx, sandbox.BuildOptions{
		ContextDir: dir, Dockerfile: assets.RunnerDockerfile, Tag: name, Target: variant, Out: out,
	})
	if err != nil {
		return "", fmt.Errorf("building %s with %s: %w", name, rt.Name(), err)
	}
	return name, nil
}
