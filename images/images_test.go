package images

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	assets "github.com/bridge-mcp/bridge"
	"github.com/bridge-mcp/bridge/internal/relay"
)

// `bridge image build` makes the variants' images: the hints name the
// command for those alone, and say what to do about any other.
func TestHints(t *testing.T) {
	for _, tt := range []struct {
		name, image     string
		missing, broken []string
		not             []string
	}{
		{"built-in", Name(),
			[]string{"build it with `bridge image build --runtime docker`"},
			[]string{"rebuild it with `bridge image build --runtime docker`"},
			[]string{"not an image", "--image", "--variant"}},
		{"datascience", NameOf(DataScience),
			[]string{"build it with `bridge image build --runtime docker --variant datascience`"},
			[]string{"rebuild it with `bridge image build --runtime docker --variant datascience`"},
			[]string{"not an image", "--image"}},
		{"custom", "localhost/nope:1",
			[]string{"localhost/nope:1 is not an image `bridge image build` makes", "it makes only " + Name(),
				"pull or build localhost/nope:1 yourself with docker", "drop --image (sandbox.image in a policy)"},
			[]string{"localhost/nope:1 is not an image `bridge image build` makes", "FROM " + Name(), "drop --image"},
			[]string{"build it with", "rebuild it with"}},
		{"another bridge's runner", Repository + ":000000000000",
			[]string{Repository + ":000000000000 is not an image `bridge image build` makes"},
			[]string{"is not an image `bridge image build` makes"},
			[]string{"build it with"}},
		{"a custom image built elsewhere", Repository + ":custom-000000000000",
			[]string{"is a custom image (`bridge image build --apt ... --wheels ...`) that docker does not hold",
				"build it again for docker with the same --variant, --apt and --wheels"},
			[]string{"is a custom image, perhaps of another bridge's runner: build it again with this bridge",
				"select the name it prints"},
			[]string{"build it with `", "FROM"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, b := MissingHint(tt.image, "docker"), RebuildHint(tt.image, "docker")
			for _, w := range tt.missing {
				if !strings.Contains(m, w) {
					t.Errorf("MissingHint %q does not say %q", m, w)
				}
			}
			for _, w := range tt.broken {
				if !strings.Contains(b, w) {
					t.Errorf("RebuildHint %q does not say %q", b, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(m, w) || strings.Contains(b, w) {
					t.Errorf("a hint says %q:\n%s\n%s", w, m, b)
				}
			}
		})
	}
	if h := NoRunnerHint(); !strings.Contains(h, "build it FROM "+Name()+" (slim) or "+NameOf(DataScience)+" (datascience)") {
		t.Errorf("NoRunnerHint: %s", h)
	}
}

// Slim keeps the tag it always had (the hash of the build context alone);
// each other variant has its own; the Dockerfile has a target of each name.
func TestNames(t *testing.T) {
	h := sha256.New()
	hashFS(h, assets.RunnerContext)
	if want := Repository + ":" + hex.EncodeToString(h.Sum(nil))[:12]; Name() != want || NameOf(Slim) != want {
		t.Errorf("Name() = %s, NameOf(Slim) = %s, want %s", Name(), NameOf(Slim), want)
	}
	ds := NameOf(DataScience)
	if !regexp.MustCompile(`^localhost/bridge-runner:datascience-[0-9a-f]{12}$`).MatchString(ds) || ds[len(ds)-12:] == Name()[len(Name())-12:] {
		t.Errorf("NameOf(DataScience) = %s", ds)
	}
	df, err := assets.RunnerContext.ReadFile(assets.RunnerDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Variants() {
		if err := CheckVariant(v); err != nil {
			t.Error(err)
		}
		if got, ok := IsBuilt(NameOf(v)); !ok || got != v {
			t.Errorf("IsBuilt(%s) = %q, %v", NameOf(v), got, ok)
		}
		if !strings.Contains(string(df), " AS "+v+"\n") {
			t.Errorf("%s has no stage %s", assets.RunnerDockerfile, v)
		}
		// Every variant carries the labels doctor reads.
		if !strings.Contains(string(df), LabelProtocol+`="`+strconv.Itoa(relay.Version)+`"`) || !strings.Contains(string(df), LabelVariant+`="`+v+`"`) {
			t.Errorf("%s does not label %s with %s and %s", assets.RunnerDockerfile, v, LabelProtocol, LabelVariant)
		}
	}
	if n := strings.Count(string(df), LabelProtocol+`="`+strconv.Itoa(relay.Version)+`"`); n != len(Variants()) {
		t.Errorf("%s sets %s %d times, want once a variant", assets.RunnerDockerfile, LabelProtocol, n)
	}
	if _, ok := IsBuilt("localhost/other:1"); ok {
		t.Error("IsBuilt(localhost/other:1)")
	}
	err = CheckVariant("datascence")
	if err == nil || err.Error() != `"datascence" is not a variant: want one of slim, datascience; did you mean "datascience"?` {
		t.Errorf("CheckVariant(datascence) = %v", err)
	}
}

func TestCheckPackage(t *testing.T) {
	for _, ok := range []string{"graphviz", "python3-six", "libc6", "g++", "libstdc++6", "fonts-dejavu-core", "r-base", "xz-utils", "0ad", "python3.11"} {
		if err := CheckPackage(ok); err != nil {
			t.Errorf("CheckPackage(%q): %v", ok, err)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"-y", "cannot start with '-' (options cannot be passed to apt-get)"},
		{"--allow-unauthenticated", "cannot start with '-'"},
		{"Graphviz", `lowercase: "graphviz"`},
		{"curl=7.88.1-10", "without a version or release"},
		{"curl/bookworm-backports", "without a version or release"},
		{"a", "at least two"},
		{"", "at least two"},
		{"foo;rm -rf /", "is not a Debian package name"},
		{"foo$(id)", "is not a Debian package name"},
		{"foo bar", "is not a Debian package name"},
		{"pkg:amd64", "is not a Debian package name"},
		{".hidden", "starting with a letter or digit"},
		{strings.Repeat("a", 129), "longer than 128 bytes"},
	} {
		err := CheckPackage(tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "apt-cache search") {
			t.Errorf("CheckPackage(%q) = %v, want it to say %q and how to find the name", tc.name, err, tc.want)
		}
	}
}

func TestSplitPackages(t *testing.T) {
	got, err := SplitPackages([]string{"graphviz, python3-six", "jq graphviz", "  ", "a1,,b2"})
	if err != nil || strings.Join(got, " ") != "a1 b2 graphviz jq python3-six" {
		t.Errorf("SplitPackages = %v, %v", got, err)
	}
	_, err = SplitPackages([]string{"ok-one,-x", "BAD"})
	if err == nil || !strings.Contains(err.Error(), `"-x"`) || !strings.Contains(err.Error(), `"BAD"`) {
		t.Errorf("every bad name is named: %v", err)
	}
}

// A wheel-like file: enough for Wheels, which checks the name and the zip
// header, not the contents.
func fakeWheel(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("PK\x03\x04"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWheels(t *testing.T) {
	dir := t.TempDir()
	b := fakeWheel(t, dir, "b_pkg-1.0-py3-none-any.whl", "b")
	a := fakeWheel(t, dir, "a_pkg-2.0.1-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "a")
	if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Wheels(dir)
	if err != nil || strings.Join(got, " ") != a+" "+b {
		t.Errorf("Wheels = %v, %v", got, err)
	}

	empty := t.TempDir()
	notZip := t.TempDir()
	if err := os.WriteFile(filepath.Join(notZip, "x-1.0-py3-none-any.whl"), []byte("<html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	badName := t.TempDir()
	fakeWheel(t, badName, "x 1.0.whl", "")
	for _, tc := range []struct{ dir, want string }{
		{filepath.Join(empty, "missing"), "no such folder: give the folder that holds your .whl files"},
		{b, "is a file, not a folder"},
		{empty, "holds no .whl files: put the wheels there, with their dependencies"},
		{notZip, "is not a wheel (a wheel is a zip archive): download or build it again"},
		{badName, "is not a wheel's file name"},
	} {
		if _, err := Wheels(tc.dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Wheels(%s) = %v, want %q", tc.dir, err, tc.want)
		}
	}
}

// The custom image's tag hashes what goes into it: the variant, the package
// names (not their order or repeats) and the wheels' names and bytes.
func TestCustomName(t *testing.T) {
	dir := t.TempDir()
	w := fakeWheel(t, dir, "a_pkg-1.0-py3-none-any.whl", "one")
	name := func(c Custom) string {
		t.Helper()
		n, err := c.Name()
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^localhost/bridge-runner:custom-[0-9a-f]{12}$`).MatchString(n) {
			t.Fatalf("Name() = %s", n)
		}
		return n
	}
	base := name(Custom{Apt: []string{"jq", "graphviz"}, WheelsDir: dir})
	if n := name(Custom{Variant: Slim, Apt: []string{"graphviz jq", "jq"}, WheelsDir: dir}); n != base {
		t.Errorf("same packages in another order: %s, want %s", n, base)
	}
	seen := map[string]string{base: "base"}
	differ := func(what string, c Custom) {
		t.Helper()
		n := name(c)
		if other, ok := seen[n]; ok {
			t.Errorf("%s: same tag as %s (%s)", what, other, n)
		}
		seen[n] = what
	}
	differ("another variant", Custom{Variant: DataScience, Apt: []string{"jq", "graphviz"}, WheelsDir: dir})
	differ("a package fewer", Custom{Apt: []string{"jq"}, WheelsDir: dir})
	differ("no wheels", Custom{Apt: []string{"jq", "graphviz"}})
	if err := os.WriteFile(w, []byte("PK\x03\x04two"), 0o644); err != nil {
		t.Fatal(err)
	}
	differ("other wheel bytes", Custom{Apt: []string{"jq", "graphviz"}, WheelsDir: dir})
	fakeWheel(t, dir, "b_pkg-1.0-py3-none-any.whl", "")
	differ("another wheel", Custom{Apt: []string{"jq", "graphviz"}, WheelsDir: dir})

	for _, tc := range []struct {
		c    Custom
		want string
	}{
		{Custom{}, "a custom image needs --apt PKG or --wheels DIR"},
		{Custom{Variant: "fat", Apt: []string{"jq"}}, `--variant "fat" is not a variant`},
		{Custom{Apt: []string{"-f"}}, `--apt: "-f" is not a Debian package name`},
		{Custom{WheelsDir: filepath.Join(dir, "nope")}, "no such folder"},
	} {
		if _, err := tc.c.Name(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

// The custom Dockerfile gets the packages only as a build argument, and
// removes nothing it did not install: pip stays in its own stage.
func TestCustomDockerfile(t *testing.T) {
	df := assets.CustomDockerfile
	for _, want := range []string{"ARG RUNNER", "FROM ${RUNNER} AS apt", "apt-get install -y --no-install-recommends $APT_PACKAGES",
		"FROM apt AS wheels", "--no-index --find-links /tmp/wheels", "--break-system-packages", "COPY --from=wheels /install/ /",
		`io.github.bridge-mcp.variant="custom"`, "USER 65534:65534"} {
		if !strings.Contains(df, want) {
			t.Errorf("images/Dockerfile.custom lacks %q", want)
		}
	}
	final := df[strings.LastIndex(df, "\nFROM "):]
	if strings.Contains(final, "pip") && !strings.Contains(final, "COPY --from=wheels") || strings.Contains(final, "python3-pip") {
		t.Errorf("the final stage installs pip:\n%s", final)
	}
}

// Every module of the runner's lib folder is in the image's build context:
// a file left out of the embed pattern would be missing in the sandbox
// while the in-process tests pass.
func TestRunnerContextHasTheLib(t *testing.T) {
	lib := filepath.Join("..", "images", "runner", "lib")
	err := filepath.WalkDir(lib, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".py") {
			return nil
		}
		rel, _ := filepath.Rel("..", p)
		if _, err := assets.RunnerContext.Open(filepath.ToSlash(rel)); err != nil {
			t.Errorf("%s is not in the runner's build context (assets.go's embed pattern): %v", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMissingHintKubernetes(t *testing.T) {
	h := MissingHint("localhost/bridge-runner:abc", "kubernetes")
	for _, w := range []string{"bridge image build --runtime docker", "docker save localhost/bridge-runner:abc | ctr -n k8s.io images import -"} {
		if !strings.Contains(h, w) {
			t.Errorf("%q does not say %q", h, w)
		}
	}
}
