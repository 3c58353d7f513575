package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	assets "github.com/bridge-mcp/bridge"
	"github.com/bridge-mcp/bridge/sandbox"
)

// customPrefix starts the tag of every custom image.
const customPrefix = "custom-"

// Custom is an operator's own image: a variant's, plus Debian packages
// (from Debian's mirror, at build time) and Python wheels (from a local
// folder, installed with pip --no-index). Nothing is fetched at run time.
type Custom struct {
	// Variant is the runner image it starts from; "" means Slim.
	Variant string
	// Apt are Debian package names (CheckPackage).
	Apt []string
	// WheelsDir is a folder holding .whl files; "" for none.
	WheelsDir string
	// Arch is the machine the image is for (x86_64, aarch64), against
	// which the wheels' platform tags are checked; "" means this one's
	// (Arch()).
	Arch string
}

// debName is Debian's grammar of a package name (Debian Policy 5.6.7): at
// least two characters of lowercase letters, digits, +, - and ., starting
// with a letter or digit. It cannot start with "-": no name is an option.
var debName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

// maxPackageName bounds a package name: Debian has none, but every real one
// is far shorter.
const maxPackageName = 128

// CheckPackage says what is wrong with a Debian package name, or nil.
func CheckPackage(name string) error {
	if len(name) <= maxPackageName && debName.MatchString(name) {
		return nil
	}
	shown := name
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	why := "Debian package names are lowercase letters, digits, '+', '-' and '.', at least two, starting with a letter or digit"
	switch {
	case strings.HasPrefix(name, "-"):
		why = "a package name cannot start with '-' (options cannot be passed to apt-get)"
	case strings.ContainsAny(name, "=/"):
		why = "give the package's name alone, without a version or release (the build installs bookworm's)"
	case strings.ToLower(name) != name && debName.MatchString(strings.ToLower(name)):
		why = fmt.Sprintf("Debian package names are lowercase: %q", strings.ToLower(name))
	case len(name) > maxPackageName:
		why = fmt.Sprintf("longer than %d bytes", maxPackageName)
	}
	return fmt.Errorf("%q is not a Debian package name: %s; find the name with `apt-cache search WORD` or at https://packages.debian.org/bookworm/", shown, why)
}

// SplitPackages reads --apt values: each holds one or more package names,
// separated by commas or spaces. It returns them sorted, without repeats,
// or an error naming every bad one.
func SplitPackages(values []string) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	var errs []error
	for _, v := range values {
		for _, n := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
			if err := CheckPackage(n); err != nil {
				errs = append(errs, err)
				continue
			}
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// wheelName is a wheel's file name (PEP 427):
// {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl.
var wheelName = regexp.MustCompile(`^[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-[0-9][A-Za-z0-9_]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl$`)

// Wheels lists the .whl files of dir, sorted, checking that each is a wheel:
// a zip archive with a wheel's file name. A missing dir, or one without
// wheels, is an error that says what to do.
func Wheels(dir string) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--wheels %s: no such folder: give the folder that holds your .whl files", dir)
		}
		return nil, fmt.Errorf("--wheels %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("--wheels %s is a file, not a folder: put your .whl files in a folder and give that", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--wheels %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".whl") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if !wheelName.MatchString(e.Name()) {
			return nil, fmt.Errorf("--wheels: %s is not a wheel's file name (NAME-VERSION-PYTHON-ABI-PLATFORM.whl, PEP 427): "+
				"keep the name pip wheel or pip download gave it", p)
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("--wheels: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("--wheels: %s is not a regular file", p)
		}
		if err := checkZip(p); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("--wheels %s holds no .whl files: put the wheels there, with their dependencies "+
			"(on a machine that reaches PyPI: `pip download --only-binary :all: --platform manylinux2014_x86_64 "+
			"--python-version 3.11 -d %s PKG`, or `pip wheel -w %s PKG`)", dir, dir, dir)
	}
	sort.Strings(paths)
	return paths, nil
}

// checkZip says whether the file at p starts as a zip archive does.
func checkZip(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("--wheels: %w", err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, []byte("PK\x03\x04")) {
		return fmt.Errorf("--wheels: %s is not a wheel (a wheel is a zip archive): download or build it again", p)
	}
	return nil
}

// resolved is a Custom whose packages and wheels were read and checked.
type resolved struct {
	variant string
	apt     []string
	wheels  []string // paths
	name    string
}

func (c Custom) resolve() (resolved, error) {
	r := resolved{variant: c.Variant}
	if r.variant == "" {
		r.variant = Slim
	}
	if err := CheckVariant(r.variant); err != nil {
		return r, fmt.Errorf("--variant %w", err)
	}
	apt, err := SplitPackages(c.Apt)
	if err != nil {
		return r, fmt.Errorf("--apt: %w", err)
	}
	r.apt = apt
	if c.WheelsDir != "" {
		if r.wheels, err = Wheels(c.WheelsDir); err != nil {
			return r, err
		}
		arch := c.Arch
		if arch == "" {
			arch = Arch()
		}
		var errs []error
		for _, p := range r.wheels {
			errs = append(errs, CheckWheelTags(filepath.Base(p), arch))
		}
		if err := errors.Join(errs...); err != nil {
			return r, err
		}
	}
	if len(r.apt) == 0 && len(r.wheels) == 0 {
		return r, errors.New("a custom image needs --apt PKG or --wheels DIR (or both)")
	}
	h := sha256.New()
	fmt.Fprintf(h, "custom\x00%s\x00%d\x00%s", NameOf(r.variant), len(assets.CustomDockerfile), assets.CustomDockerfile)
	fmt.Fprintf(h, "apt\x00%s\x00", strings.Join(r.apt, " "))
	for _, p := range r.wheels {
		f, err := os.Open(p)
		if err != nil {
			return r, fmt.Errorf("--wheels: %w", err)
		}
		st, err := f.Stat()
		if err == nil {
			fmt.Fprintf(h, "wheel\x00%s\x00%d\x00", filepath.Base(p), st.Size())
			_, err = io.Copy(h, f)
		}
		f.Close()
		if err != nil {
			return r, fmt.Errorf("--wheels: reading %s: %w", p, err)
		}
	}
	r.name = Repository + ":" + customPrefix + hex.EncodeToString(h.Sum(nil))[:12]
	return r, nil
}

// Name returns the custom image's reference,
// Repository:custom-<12 hex digits>, hashing the variant's image name, the
// package names and the wheels' names and bytes: the same inputs name the
// same image.
func (c Custom) Name() (string, error) {
	r, err := c.resolve()
	return r.name, err
}

// BuildCustom builds c through rt, streaming the build log to out, and
// returns the image reference. It builds the variant's image first when rt
// does not hold it.
func BuildCustom(ctx context.Context, rt sandbox.Images, c Custom, out io.Writer) (string, error) {
	r, err := c.resolve()
	if err != nil {
		return "", err
	}
	if out == nil {
		out = io.Discard
	}
	base := NameOf(r.variant)
	if _, err := rt.ImageInfo(ctx, base); errors.Is(err, sandbox.ErrImageNotFound) {
		fmt.Fprintf(out, "%s has no %s (the %s variant it starts from): building it first\n", rt.Name(), base, r.variant)
		if _, err := Build(ctx, rt, r.variant, out); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "bridge-image-custom-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(assets.CustomDockerfile), 0o644); err != nil {
		return "", err
	}
	wdir := filepath.Join(dir, "wheels")
	if err := os.Mkdir(wdir, 0o755); err != nil {
		return "", err
	}
	var names []string
	for _, p := range r.wheels {
		names = append(names, filepath.Base(p))
		if err := copyFile(p, filepath.Join(wdir, filepath.Base(p))); err != nil {
			return "", fmt.Errorf("--wheels: %w", err)
		}
	}
	args := map[string]string{"RUNNER": base, "APT_PACKAGES": strings.Join(r.apt, " "), "WHEELS": strings.Join(names, " ")}
	if len(r.wheels) > 0 {
		args["PIP"] = "1"
	}
	tail := &tailWriter{w: out}
	err = rt.BuildImage(ctx, sandbox.BuildOptions{ContextDir: dir, Dockerfile: "Dockerfile", Tag: r.name, Args: args, Out: tail})
	if err != nil {
		return "", fmt.Errorf("building %s with %s: %w\n(%s)", r.name, rt.Name(), err, buildHint(tail.String()))
	}
	return r.name, nil
}

// Hints for a custom build that failed, by the step the log's end shows.
const (
	aptHint = "apt-get found no package: check its name with `apt-cache search WORD` or at https://packages.debian.org/bookworm/"
	pipHint = "pip could not install the wheels: where it found no distribution, put its wheel in the --wheels folder too " +
		"(`pip download --only-binary :all: --platform manylinux2014_" + "ARCH --python-version " + PythonVersion + " -d DIR PKG` fetches it with its dependencies), " +
		"or install it from Debian (--apt python3-NAME, or --variant datascience)"
)

// buildHint says what to do about a custom build whose log ended with
// tail: about the packages' names when apt-get failed, about the wheels
// when pip did, else where to look.
func buildHint(tail string) string {
	switch {
	case strings.Contains(tail, "E: Unable to locate package") || strings.Contains(tail, "has no installation candidate"):
		return aptHint
	case strings.Contains(tail, "pip install") && strings.Contains(tail, "ERROR: "):
		return strings.Replace(pipHint, "ARCH", archOr(Arch()), 1)
	}
	return "the build log above says which step failed: if apt-get, " + aptHint + "; if pip, " + strings.Replace(pipHint, "ARCH", archOr(Arch()), 1)
}

// maxTail is how much of a build log's end tailWriter keeps.
const maxTail = 16 << 10

// tailWriter passes what it is given on to w, and keeps its last maxTail
// bytes.
type tailWriter struct {
	w    io.Writer
	tail []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.tail = append(t.tail, p...)
	if len(t.tail) > maxTail {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-maxTail:]...)
	}
	return t.w.Write(p)
}

func (t *tailWriter) String() string { return string(t.tail) }

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
