package images

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	assets "github.com/bridge-mcp/bridge"
	"github.com/bridge-mcp/bridge/sandbox"
)

// TestCheckWheelTags: a wheel for another Python, another machine or musl
// is refused before any build, saying its tags and what would fit.
func TestCheckWheelTags(t *testing.T) {
	for _, tc := range []struct {
		name, arch string
		want       []string // nil: it fits
	}{
		{"a-1.0-py3-none-any.whl", "x86_64", nil},
		{"a-1.0-py2.py3-none-any.whl", "aarch64", nil},
		{"a-1.0-py311-none-any.whl", "x86_64", nil},
		{"a-1.0-py38-none-any.whl", "x86_64", nil},
		{"numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "x86_64", nil},
		{"numpy-1.26.4-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", "aarch64", nil},
		{"c-1.0-1-cp37-abi3-manylinux1_x86_64.whl", "x86_64", nil},
		{"c-1.0-cp311-cp311-linux_x86_64.whl", "x86_64", nil},
		{"c-1.0-cp311-cp311-manylinux_2_36_x86_64.whl", "x86_64", nil},
		{"c-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "", nil},
		{"numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.whl", "x86_64",
			[]string{"numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.whl (python cp312, abi cp312, platform manylinux_2_17_x86_64)",
				"does not install on the runner image's CPython 3.11 on Debian bookworm (glibc 2.36) for x86_64",
				"its Python tags do not fit", "--python-version 3.11", "-!platform does not fit"}},
		{"a-1.0-py312-none-any.whl", "x86_64", []string{"its Python tags do not fit"}},
		{"a-1.0-cp312-abi3-manylinux2014_x86_64.whl", "x86_64", []string{"its Python tags do not fit"}},
		{"a-1.0-cp310-cp310-manylinux2014_x86_64.whl", "x86_64", []string{"its Python tags do not fit"}},
		{"numpy-1.26.4-cp311-cp311-manylinux_2_17_aarch64.whl", "x86_64",
			[]string{"platform manylinux_2_17_aarch64", "its platform does not fit", "manylinux_2_N_x86_64 with N up to 36", "--platform manylinux2014_x86_64", "-!Python tags"}},
		{"numpy-1.26.4-cp311-cp311-musllinux_1_1_x86_64.whl", "x86_64", []string{"musl libc", "Debian has glibc"}},
		{"numpy-1.26.4-cp311-cp311-win_amd64.whl", "x86_64", []string{"its platform does not fit"}},
		{"numpy-1.26.4-cp311-cp311-macosx_11_0_arm64.whl", "aarch64", []string{"its platform does not fit"}},
		{"c-1.0-cp311-cp311-manylinux_2_39_x86_64.whl", "x86_64", []string{"its platform does not fit"}},
	} {
		err := CheckWheelTags(tc.name, tc.arch)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s on %s: %v", tc.name, tc.arch, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s on %s: accepted", tc.name, tc.arch)
			continue
		}
		for _, w := range tc.want {
			if not, ok := strings.CutPrefix(w, "-!"); ok {
				if strings.Contains(err.Error(), not) {
					t.Errorf("%s: says %q: %v", tc.name, not, err)
				}
			} else if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: lacks %q: %v", tc.name, w, err)
			}
		}
	}
}

// A custom image is refused before its build for a wheel that does not fit.
func TestCustomWheelTags(t *testing.T) {
	dir := t.TempDir()
	fakeWheel(t, dir, "ok-1.0-py3-none-any.whl", "")
	fakeWheel(t, dir, "numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.whl", "")
	if _, err := (Custom{WheelsDir: dir, Arch: "x86_64"}).Name(); err == nil || !strings.Contains(err.Error(), "cp312") {
		t.Errorf("err %v", err)
	}
	os.Remove(filepath.Join(dir, "numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.whl"))
	fakeWheel(t, dir, "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl", "")
	if _, err := (Custom{WheelsDir: dir, Arch: "x86_64"}).Name(); err != nil {
		t.Error(err)
	}
	if _, err := (Custom{WheelsDir: dir, Arch: "aarch64"}).Name(); err == nil || !strings.Contains(err.Error(), "platform does not fit") {
		t.Errorf("aarch64: %v", err)
	}
}

// PythonVersion and the glibc are those of Dockerfile.runner's base.
func TestPythonOfTheBase(t *testing.T) {
	df, err := fs.ReadFile(assets.RunnerContext, assets.RunnerDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "\nARG BASE="+baseImage+"\n") {
		t.Errorf("Dockerfile.runner's BASE is no longer %s: update PythonVersion and the glibc of images/wheeltags.go to the new base's", baseImage)
	}
}

// failingBuild is an Images whose builds write log and fail.
type failingBuild struct{ log string }

func (f failingBuild) Name() string { return "docker" }
func (f failingBuild) ImageInfo(context.Context, string) (sandbox.ImageInfo, error) {
	return sandbox.ImageInfo{}, nil
}
func (f failingBuild) BuildImage(_ context.Context, o sandbox.BuildOptions) error {
	io.WriteString(o.Out, f.log)
	return errors.New("The command '/bin/sh -c set -eu; ...' returned a non-zero code: 1")
}

// A build that fails says what to do about the step that failed: pip's
// failure does not send the user to apt's package names, nor the other way
// round.
func TestCustomBuildFailureHint(t *testing.T) {
	dir := t.TempDir()
	fakeWheel(t, dir, "mylib-1.0-py3-none-any.whl", "")
	for _, tc := range []struct {
		name, log string
		want, not []string
	}{
		{"pip", "Step 9/14 : RUN set -eu; python3 -m pip install --no-index ...\nProcessing /tmp/wheels/mylib-1.0-py3-none-any.whl\n" +
			"ERROR: Could not find a version that satisfies the requirement requests (from mylib) (from versions: none)\n" +
			"ERROR: No matching distribution found for requests\n",
			[]string{"pip could not install the wheels", "put its wheel in the --wheels folder too", "--python-version 3.11"},
			[]string{"apt-cache search", "apt-get found no package"}},
		{"apt", "Step 3/14 : RUN set -eu; apt-get update ...\nE: Unable to locate package graphvizz\n",
			[]string{"apt-get found no package", "apt-cache search WORD"},
			[]string{"pip could not", "--wheels folder"}},
		{"other", "Step 3/14 : RUN ...\nno space left on device\n",
			[]string{"the build log above says which step failed"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			_, err := BuildCustom(context.Background(), failingBuild{tc.log}, Custom{Apt: []string{"graphvizz"}, WheelsDir: dir, Arch: "x86_64"}, &out)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("lacks %q: %v", w, err)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(err.Error(), w) {
					t.Errorf("says %q: %v", w, err)
				}
			}
			if out.String() != tc.log {
				t.Errorf("the log was not passed on: %q", out.String())
			}
		})
	}
}
