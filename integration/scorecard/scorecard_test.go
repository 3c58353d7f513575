package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The catalog parses, and every test it names exists in the integration
// suite: a top-level test as a function, each subtest's name as a string
// in the suite's source (so a renamed case fails here, before a run).
func TestCatalogNamesRealTests(t *testing.T) {
	cat, err := parseCatalog(catalogYAML)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("..", "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the integration suite's sources: %v, %v", files, err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	all := src.String()
	literals := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"`).FindAllString(all, -1) {
		if s, err := strconv.Unquote(m); err == nil {
			literals[s] = true
		}
	}
	// fillCase(dir, ...) names its case "fill " + dir.
	for _, m := range regexp.MustCompile(`fillCase\("([^"]+)"`).FindAllStringSubmatch(all, -1) {
		literals["fill "+m[1]] = true
	}
	n := 0
	for _, y := range cat.Yardsticks {
		for _, k := range y.Cases {
			for _, ref := range k.Tests {
				n++
				top, sub, _ := strings.Cut(ref, "/")
				if !strings.Contains(all, "func "+top+"(t *testing.T)") {
					t.Errorf("%s/%s names %s: no such test in the integration suite", y.ID, k.ID, top)
				}
				if sub != "" && !literals[sub] {
					t.Errorf("%s/%s names %q: no subtest of that name in the integration suite's source", y.ID, k.ID, ref)
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("the catalog names %d tests; the five yardsticks need more", n)
	}
}

func TestCatalogRefusesCasesWithoutAVerdict(t *testing.T) {
	for _, bad := range []string{
		"yardsticks:\n  - id: y\n    name: Y\n    cases:\n      - id: a\n        attack: x\n",
		"yardsticks:\n  - id: y\n    name: Y\n    cases:\n      - id: a\n        holds: h\n        tests: [TestX]\n        na: because\n",
		"yardsticks:\n  - id: y\n    name: Y\n    cases:\n      - id: a\n        tests: [TestX]\n",
		"yardsticks:\n  - id: y\n    name: Y\n    cases:\n      - id: a\n        na: n\n      - id: a\n        na: n\n",
		"yardsticks:\n  - id: y\n    name: Y\n    cases:\n      - id: a\n        na: n\n        typo: 1\n",
	} {
		if _, err := parseCatalog([]byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}

const sampleLog = `=== RUN   TestHostile
=== RUN   TestHostile/docker
=== RUN   TestHostile/docker/fork_bomb
=== RUN   TestHostile/docker/fill_/tmp
    hostile_test.go:10: some log line
=== RUN   TestHostile/podman
=== RUN   TestHostile/podman/fork_bomb
    hostile_test.go:1300: this engine cannot enforce memory and pids limits (TestRootlessPodman checks that it says so)
=== RUN   TestHostile/podman/fill_/tmp
        --- PASS: TestHostile/docker/fork_bomb (1.00s)
        --- FAIL: TestHostile/docker/fill_/tmp (2.00s)
    --- FAIL: TestHostile/docker (3.00s)
        --- SKIP: TestHostile/podman/fork_bomb (0.00s)
        --- PASS: TestHostile/podman/fill_/tmp (1.00s)
    --- PASS: TestHostile/podman (3.00s)
--- FAIL: TestHostile (6.00s)
=== RUN   TestKube
    kube_test.go:5: it deploys the bridge to the test cluster
--- SKIP: TestKube (0.00s)
=== RUN   TestConformance
=== RUN   TestConformance/serve
=== RUN   TestConformance/serve/docker
    --- PASS: TestConformance/serve/docker (1.00s)
=== RUN   TestConformance/proxy
    --- PASS: TestConformance/proxy (1.00s)
--- PASS: TestConformance (2.00s)
`

func TestParseLog(t *testing.T) {
	res := results{}
	if err := parseLog(strings.NewReader(sampleLog), []string{"docker", "podman"}, res); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]outcome{
		"docker": {"TestHostile/fork_bomb": passed, "TestHostile/fill_/tmp": failed, "TestHostile": failed,
			"TestKube": skipped, "TestConformance/serve": passed, "TestConformance/proxy": passed},
		"podman": {"TestHostile/fork_bomb": skipped, "TestHostile/fill_/tmp": passed, "TestHostile": passed,
			"TestKube": skipped, "TestConformance/proxy": passed},
	}
	for e, tests := range want {
		for k, o := range tests {
			if got := res[e][k]; got.outcome != o {
				t.Errorf("%s %s: %v, want %v", e, k, got, o)
			}
		}
	}
	if _, ok := res["podman"]["TestConformance/serve"]; ok {
		t.Error("TestConformance/serve ran on docker only")
	}
	if r := res["podman"]["TestHostile/fork_bomb"]; !strings.Contains(r.reason, "cannot enforce") {
		t.Errorf("the skip's reason: %q", r.reason)
	}
}

func TestRender(t *testing.T) {
	res := results{}
	if err := parseLog(strings.NewReader(sampleLog), []string{"docker", "podman"}, res); err != nil {
		t.Fatal(err)
	}
	cat, err := parseCatalog([]byte(`yardsticks:
  - id: y
    name: The Yardstick
    source: where it is from
    cases:
      - id: bomb
        attack: a fork bomb
        holds: the pids limit
        tests: [TestHostile/fork bomb]
      - id: fill
        attack: fills /tmp
        holds: ENOSPC
        tests: [TestHostile/fill /tmp]
      - id: kube
        attack: the cluster's own
        holds: h
        tests: [TestKube]
      - id: kubesub
        attack: k
        holds: h
        tests: [TestKube/a part]
      - id: lost
        attack: l
        holds: h
        tests: [TestGone]
      - id: proxy
        attack: p
        holds: h
        tests: [TestConformance/proxy]
      - id: client
        na: the client's
`))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(render(cat, res))
	for _, want := range []string{
		"## The Yardstick",
		"**7 cases: 2 of the 6 that apply held on every engine that ran them (2 of those are not run, or not enforced, on some engine); 1 failed; 1 not applicable.**",
		"| bomb | a fork bomb | the pids limit | held | not enforced | not run | not run | not run | `TestHostile/fork bomb` |",
		"| fill | fills /tmp | ENOSPC | **FAILED** | held | not run | not run | not run | `TestHostile/fill /tmp` |",
		// Skipped by the suite's rule on docker and podman: another
		// engine's own, so not for the passes that leave it out either.
		"| kube | the cluster's own | h | — | — | — | — | — |",
		// A subtest of a skipped test has its parent's skip.
		"| kubesub | k | h | — | — | — | — | — |",
		// A test no pass ran.
		"| lost | l | h | not run | not run | not run | not run | not run |",
		"| client |  | not applicable: the client's | n/a | n/a | n/a | n/a | n/a |  |",
		"- fill on Docker: `TestHostile/fill /tmp` failed",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the scorecard lacks %q:\n%s", want, doc)
		}
	}
}

// -check fails, naming what to do, when the committed file and the run
// disagree, and passes when they agree.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	for _, p := range passes {
		if err := os.WriteFile(filepath.Join(dir, p.log), []byte(sampleLog), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "scorecard.md")
	if err := run(dir, out, true); err == nil || !strings.Contains(err.Error(), "make scorecard") {
		t.Fatalf("no scorecard yet: %v", err)
	}
	if err := run(dir, out, false); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, out, true); err != nil {
		t.Fatalf("just written: %v", err)
	}
	if err := os.WriteFile(out, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, out, true); err == nil || !strings.Contains(err.Error(), "disagrees") {
		t.Fatalf("edited by hand: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "rootless.log")); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, out, false); err == nil || !strings.Contains(err.Error(), "rootless.log") {
		t.Fatalf("a pass's log missing: %v", err)
	}
}
