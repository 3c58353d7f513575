package integration

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
)

// needImage fails (CI) or skips the test when e does not hold image:
// `make image` builds every variant for every engine.
func needImage(t *testing.T, e *engine, image string) {
	t.Helper()
	_, err := e.rt.ImageInfo(context.Background(), image)
	need(t, err == nil, "%s: %v (run `make image`)", e.name, err)
}

// runIn runs code in image on e and returns its result.
func runIn(t *testing.T, e *engine, image, code string) sandbox.Result {
	t.Helper()
	ex, err := sandbox.NewExecutor(context.Background(), e.rt, sandbox.ExecutorOptions{
		Image: image, AllowUnenforcedLimits: !e.enforced, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	l := limits()
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout+time.Minute)
	defer cancel()
	res, err := ex.Run(ctx, sandbox.Request{Code: code, Limits: l})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// The data-science variant, which `make image` builds from Debian's
// packages, runs numpy, pandas and matplotlib in the sandbox: a plot drawn
// to PNG off-screen, on a read-only root with /tmp the only place to write.
func TestImageDataScience(t *testing.T) {
	image := images.NameOf(images.DataScience)
	const code = `import io, os
import numpy, pandas, matplotlib
import matplotlib.pyplot as plt
df = pandas.DataFrame({"x": numpy.arange(5), "y": numpy.arange(5) ** 2})
fig, ax = plt.subplots()
df.plot(x="x", y="y", ax=ax)
ax.set_title("squares")
buf = io.BytesIO()
fig.savefig(buf, format="png")
import scipy.stats, sklearn.linear_model, PIL.Image, openpyxl
fit = sklearn.linear_model.LinearRegression().fit(df[["x"]], df["y"])
print(int(df.y.sum()), matplotlib.get_backend(), buf.getvalue()[:4] == b"\x89PNG", round(float(fit.coef_[0])),
      os.environ.get("MPLCONFIGDIR"))
print("versions", numpy.__version__, pandas.__version__, matplotlib.__version__)
`
	forEachEngine(t, func(t *testing.T, e *engine) {
		needImage(t, e, image)
		res := runIn(t, e, image, code)
		if res.Status != sandbox.StatusOK {
			t.Fatalf("status %s (%s)\nstdout:\n%s\nstderr:\n%s", res.Status, res.Message, res.Stdout, res.Stderr)
		}
		first, _, _ := strings.Cut(res.Stdout, "\n")
		if first != "30 agg True 4 /tmp/matplotlib" {
			t.Errorf("stdout:\n%s", res.Stdout)
		}
		// No warning: not about the font cache, nor about a config folder
		// matplotlib could not write.
		if strings.TrimSpace(res.Stderr) != "" {
			t.Errorf("stderr:\n%s", res.Stderr)
		}
		t.Logf("%s: %s", e.name, strings.TrimSpace(res.Stdout))
	})
}

// wheelFile is one file of a wheel: its path in the archive and contents.
type wheelFile struct{ path, body string }

// writeWheel writes a pure-Python wheel for distribution dist (its name as
// in a file name, with underscores) at version into dir, as pip would find
// it: the files, METADATA (with requires as Requires-Dist), WHEEL and
// RECORD.
func writeWheel(t *testing.T, dir, dist, version string, requires []string, files ...wheelFile) string {
	t.Helper()
	info := dist + "-" + version + ".dist-info/"
	meta := "Metadata-Version: 2.1\nName: " + strings.ReplaceAll(dist, "_", "-") + "\nVersion: " + version + "\n"
	for _, r := range requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files = append(files,
		wheelFile{info + "METADATA", meta},
		wheelFile{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: bridge-integration-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"})
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := z.Create(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(info + "RECORD,,\n")
	w, err := z.Create(info + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, dist+"-"+version+"-py3-none-any.whl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// imageBuilds is the rule of a test that builds an image on the engine.
func imageBuilds() engineRule {
	return except("the kubernetes engine builds no images (`bridge image build --runtime kubernetes` refuses): an image for a cluster is built with Docker or Podman beside its node and imported", kindKubernetes)
}

// imageLabels is the rule of a test of what doctor reads from an image's
// labels (its runner, variant and packages).
func imageLabels() engineRule {
	return except("the Kubernetes API shows no image's labels (a node lists its images by name and size), "+
		"so doctor reads neither the runner's label nor the variant and packages there: its smoke run proves the runner", kindKubernetes)
}

// removeImage removes image from e's store through the engine's CLI, as an
// operator would; the test fails if it cannot.
func removeImage(t *testing.T, e *engine, image string) {
	t.Helper()
	var cmd *exec.Cmd
	if e.imagesEngine() == sandbox.EngineDocker {
		cmd = exec.Command("docker", "--host", e.cand.URI, "rmi", image)
	} else {
		cmd = exec.Command("podman", "--remote", "--url", e.cand.URI, "rmi", image)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("removing %s from %s: %v\n%s", image, e.name, err, out)
	}
}

// doctorReport runs `bridge doctor --json args...` on e and returns its
// report of e, with the text report of the same run's arguments.
func doctorReport(t *testing.T, e *engine, args ...string) (doctor.EngineReport, string, int) {
	t.Helper()
	args = append([]string{"doctor", "--runtime", e.cand.Engine}, args...)
	if !e.enforced {
		args = append(args, "--allow-unenforced-limits")
	}
	out, errOut, code := bridgeCLI(t, engineEnv(e), "", append(args, "--json")...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json printed no JSON (%v):\n%s\n%s", err, out, errOut)
	}
	text, _, _ := bridgeCLI(t, engineEnv(e), "", args...)
	for _, er := range rep.Engines {
		if er.Socket == e.cand.URI {
			return er, text, code
		}
	}
	t.Fatalf("doctor did not check %s:\n%s", e.cand.URI, out)
	return doctor.EngineReport{}, "", 0
}

// An operator's own packages, offline: Debian's python3-six through --apt
// and two wheels written here (one needs the other and six) through
// --wheels, into a custom image that `bridge run --image` runs and doctor
// lists the wheels of.
func TestImageWheels(t *testing.T) {
	forEngines(t, imageBuilds(), func(t *testing.T, e *engine) {
		needImage(t, e, imageName())
		dir := t.TempDir()
		// A nonce in the code makes this run's image its own: removing it
		// cannot touch another run's.
		nonce := make([]byte, 6)
		_, _ = rand.Read(nonce)
		writeWheel(t, dir, "bridgetest_dep", "1.0", nil, wheelFile{"bridgetest_dep/__init__.py", "VALUE = 41\n"})
		writeWheel(t, dir, "bridgetest_app", "0.2", []string{"bridgetest-dep", "six"}, wheelFile{"bridgetest_app/__init__.py",
			fmt.Sprintf("import six, bridgetest_dep\nNONCE = %q\n\ndef answer():\n    return bridgetest_dep.VALUE + 1\n", hex.EncodeToString(nonce))})
		flags := []string{"--apt", "python3-six", "--wheels", dir}

		name, errOut, code := bridgeCLI(t, nil, "", append([]string{"image", "name"}, flags...)...)
		ref := strings.TrimSpace(name)
		if code != 0 || !strings.HasPrefix(ref, images.Repository+":custom-") {
			t.Fatalf("image name: exit %d, %q\n%s", code, name, errOut)
		}
		stdout, stderr, code := bridgeCLI(t, engineEnv(e), "", append([]string{"image", "build", "--runtime", e.cand.Engine}, flags...)...)
		if code != 0 {
			t.Fatalf("image build: exit %d\n%s", code, stderr)
		}
		t.Cleanup(func() { removeImage(t, e, ref) })
		if strings.TrimSpace(stdout) != ref || !strings.Contains(stderr, "`sandbox.image: "+ref+"` in policy.yaml, or `--image "+ref+"`") {
			t.Errorf("image build printed %q, want %s and how to select it; stderr:\n%s", stdout, ref, stderr)
		}

		args := []string{"run", "--runtime", e.cand.Engine, "--image", ref, "-"}
		if !e.enforced {
			args = append(args, "--allow-unenforced-limits")
		}
		out, errOut, code := bridgeCLI(t, engineEnv(e), "import bridgetest_app as a, pip\nprint(a.answer(), a.NONCE)\n", args...)
		if code != 1 || !strings.Contains(errOut, "No module named 'pip'") {
			t.Errorf("pip is in the image, or the run failed otherwise: exit %d\n%s\n%s", code, out, errOut)
		}
		out, errOut, code = bridgeCLI(t, engineEnv(e), "import bridgetest_app as a\nprint(a.answer(), a.NONCE)\n", args...)
		if code != 0 || strings.TrimSpace(out) != "42 "+hex.EncodeToString(nonce) {
			t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
		}

		er, text, code := doctorReport(t, e, "--image", ref)
		if code != 0 || !er.Usable || er.Variant != "custom" {
			t.Fatalf("doctor: exit %d, usable %v, variant %q:\n%s", code, er.Usable, er.Variant, text)
		}
		var wheels []string
		for _, p := range er.Packages {
			if p.Wheel {
				wheels = append(wheels, p.Name+" "+p.Version)
			}
		}
		if strings.Join(wheels, ", ") != "bridgetest-app 0.2, bridgetest-dep 1.0" ||
			!strings.Contains(text, "from wheels: bridgetest-app 0.2, bridgetest-dep 1.0") {
			t.Errorf("doctor lists wheels %v:\n%s", wheels, text)
		}
	})
}

// What --apt and --wheels refuse, before reaching an engine.
func TestImageBuildRefuses(t *testing.T) {
	noEngine(t)
	dir := t.TempDir()
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fake-1.0-py3-none-any.whl"), []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--apt", "--no-install-recommends"}, `"--no-install-recommends" is not a Debian package name: a package name cannot start with '-'`},
		{[]string{"--apt", "Graphviz"}, `Debian package names are lowercase: "graphviz"`},
		{[]string{"--apt", "foo;rm"}, `"foo;rm" is not a Debian package name`},
		{[]string{"--wheels", filepath.Join(empty, "nope")}, "no such folder: give the folder that holds your .whl files"},
		{[]string{"--wheels", empty}, "holds no .whl files: put the wheels there"},
		{[]string{"--wheels", dir}, "is not a wheel (a wheel is a zip archive)"},
		{[]string{"--variant", "datascence"}, `did you mean "datascience"?`},
	} {
		_, errOut, code := bridgeCLI(t, []string{"DOCKER_HOST=unix:///nonexistent.sock", "CONTAINER_HOST=unix:///nonexistent.sock"}, "",
			append([]string{"image", "build"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("image build %v: exit %d, want 2 and %q:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}

// doctor says which image each engine runs and the notable packages in it:
// every one in the data-science variant, none in slim.
func TestDoctorPackages(t *testing.T) {
	forEngines(t, imageLabels(), func(t *testing.T, e *engine) {
		image := images.NameOf(images.DataScience)
		needImage(t, e, image)
		er, text, code := doctorReport(t, e, "--variant", images.DataScience)
		if code != 0 || er.Image != image || er.Variant != images.DataScience {
			t.Fatalf("doctor --variant datascience: exit %d, image %s, variant %q:\n%s", code, er.Image, er.Variant, text)
		}
		got := map[string]string{}
		for _, p := range er.Packages {
			got[p.Name] = p.Version
		}
		for _, name := range doctor.NotablePackages() {
			if got[name] == "" || got[name][0] < '0' || got[name][0] > '9' {
				t.Errorf("doctor lists %s as %q", name, got[name])
			}
		}
		if !strings.Contains(text, image+" (datascience, ") || !strings.Contains(text, "packages: Python 3.11") ||
			!strings.Contains(text, "numpy "+got["numpy"]+", pandas "+got["pandas"]) {
			t.Errorf("text report:\n%s", text)
		}

		er, text, _ = doctorReport(t, e)
		if er.Image != imageName() || er.Variant != images.Slim || len(er.Packages) != 0 || !strings.Contains(text, "none of numpy, pandas") {
			t.Errorf("doctor on slim: image %s variant %q packages %v:\n%s", er.Image, er.Variant, er.Packages, text)
		}
	})
}

// doctor on an image without the runner (the Debian base image the runner
// is built from) says so plainly, and how to build one that has it, rather
// than fail a smoke run.
func TestDoctorNoRunner(t *testing.T) {
	forEngines(t, imageLabels(), func(t *testing.T, e *engine) {
		base := "docker.io/library/debian:bookworm-slim"
		if e.imagesEngine() == sandbox.EngineDocker {
			base = "debian:bookworm-slim"
		}
		needImage(t, e, base)
		er, text, code := doctorReport(t, e, "--image", base)
		var runner *doctor.Check
		for i, c := range er.Checks {
			if c.Name == "runner" {
				runner = &er.Checks[i]
			}
			if c.Name == "smoke_run" || c.Name == "relay" {
				t.Errorf("doctor ran code in an image without a runner: %+v", c)
			}
		}
		want := base + " has no bridge runner (label " + images.LabelProtocol + " missing)"
		if code != 1 || er.Usable || runner == nil || runner.OK || runner.Detail != want ||
			!strings.Contains(runner.Hint, "build it FROM "+imageName()) {
			t.Fatalf("doctor --image %s: exit %d, runner check %+v:\n%s", base, code, runner, text)
		}
		if !strings.Contains(text, "FAIL runner              "+want) {
			t.Errorf("text report:\n%s", text)
		}
	})
}

// An image the operator builds FROM the runner image with a Dockerfile of
// their own is accepted as sandbox.image: it carries the runner (and its
// label), so runs and doctor work in it.
func TestImageFromRunner(t *testing.T) {
	forEngines(t, imageBuilds(), func(t *testing.T, e *engine) {
		needImage(t, e, imageName())
		nonce := make([]byte, 6)
		_, _ = rand.Read(nonce)
		ref := "localhost/bridge-test-mine:" + hex.EncodeToString(nonce)
		dir := t.TempDir()
		dockerfile := "ARG RUNNER\nFROM ${RUNNER}\nUSER root\n" +
			"RUN echo 'VALUE = 7' > /usr/local/lib/python3.11/dist-packages/mine.py\nUSER 65534:65534\n"
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		err := e.rt.BuildImage(context.Background(), sandbox.BuildOptions{
			ContextDir: dir, Dockerfile: "Dockerfile", Tag: ref, Args: map[string]string{"RUNNER": imageName()}, Out: &log,
		})
		if err != nil {
			t.Fatalf("building %s: %v\n%s", ref, err, log.String())
		}
		t.Cleanup(func() { removeImage(t, e, ref) })

		pol := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nsandbox:\n  image: %q\n  require_enforced_limits: %v\n", ref, e.enforced)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := bridgeCLI(t, engineEnv(e), "import mine\nprint(mine.VALUE * 6)\n", "run", "--runtime", e.cand.Engine, "--policy", pol, "-")
		if code != 0 || strings.TrimSpace(out) != "42" {
			t.Fatalf("run under sandbox.image %s: exit %d\n%s\n%s", ref, code, out, errOut)
		}
		er, text, code := doctorReport(t, e, "--policy", pol)
		if code != 0 || !er.Usable || er.Image != ref || !strings.Contains(text, "ok   runner ") {
			t.Errorf("doctor --policy (sandbox.image %s): exit %d, usable %v, image %s:\n%s", ref, code, er.Usable, er.Image, text)
		}
	})
}

// TestImageWheelsRefused: a wheel for another Python is refused before any
// build, naming its tags; a wheel whose dependency is missing fails in
// pip's step, and the hint is about the wheels, not apt's package names.
func TestImageWheelsRefused(t *testing.T) {
	runsOn(t, imageBuilds())
	wrong := t.TempDir()
	writeWheel(t, wrong, "bridgetest_dep", "1.0", nil, wheelFile{"bridgetest_dep/__init__.py", "VALUE = 41\n"})
	if err := os.Rename(filepath.Join(wrong, "bridgetest_dep-1.0-py3-none-any.whl"),
		filepath.Join(wrong, "bridgetest_dep-1.0-cp312-cp312-manylinux_2_17_x86_64.whl")); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := bridgeCLI(t, nil, "", "image", "build", "--wheels", wrong)
	if code != 2 || !strings.Contains(errOut, "bridgetest_dep-1.0-cp312-cp312-manylinux_2_17_x86_64.whl (python cp312, abi cp312") ||
		!strings.Contains(errOut, "CPython 3.11") {
		t.Fatalf("a cp312 wheel: exit %d\n%s", code, errOut)
	}
	forEngines(t, imageBuilds(), func(t *testing.T, e *engine) {
		needImage(t, e, imageName())
		dir := t.TempDir()
		writeWheel(t, dir, "bridgetest_lonely", "1.0", []string{"bridgetest-missing"}, wheelFile{"bridgetest_lonely/__init__.py", "X = 1\n"})
		_, errOut, code := bridgeCLI(t, engineEnv(e), "", "image", "build", "--runtime", e.cand.Engine, "--wheels", dir)
		if code == 0 {
			t.Fatal("a wheel whose dependency is missing was installed")
		}
		if !strings.Contains(errOut, "pip could not install the wheels") || strings.Contains(errOut, "apt-cache search") {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
	})
}
