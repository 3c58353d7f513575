package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// An engine column of the scorecard: the name the integration tests give
// its subtests, and the pass that runs it.
type engineCol struct {
	name, label string
}

// engines are the scorecard's columns, in order.
var engines = []engineCol{
	{"docker", "Docker"},
	{"podman", "Podman"},
	{"podman-rootless", "Podman rootless"},
	{"runsc", "gVisor"},
	{"kubernetes", "Kubernetes"},
}

// passes are the integration passes' logs and the engines each tests. A
// test that names no engine in its subtests is counted for every engine
// of its pass.
var passes = []struct {
	log     string
	engines []string
}{
	{"rootful.log", []string{"docker", "podman"}},
	{"gvisor.log", []string{"runsc"}},
	{"rootless.log", []string{"podman-rootless"}},
	{"kubernetes.log", []string{"kubernetes"}},
}

type outcome int

const (
	passed outcome = iota + 1
	skipped
	failed
)

// result is what one test did on one engine.
type result struct {
	outcome outcome
	reason  string // a skip's reason, as the test logged it
}

// results holds, per engine, what each test did, keyed by testKey without
// the engine segment ("TestHostile/fork_bomb").
type results map[string]map[string]result

var (
	runLine  = regexp.MustCompile(`^=== (?:RUN|CONT|PAUSE|NAME)\s+(\S+)`)
	doneLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
	logLine  = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)`)
)

// readPasses reads every pass's log in dir.
func readPasses(dir string) (results, error) {
	res := results{}
	for _, p := range passes {
		f, err := os.Open(filepath.Join(dir, p.log))
		if err != nil {
			return nil, fmt.Errorf("%w: the scorecard needs every integration pass's log (make integration keeps them in %s)", err, dir)
		}
		err = parseLog(f, p.engines, res)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.log, err)
		}
	}
	return res, nil
}

// parseLog adds to res what the `go test -v` output r says of each test,
// for passEngines when a test's name holds no engine. A skip's reason is
// the first line the test logged.
func parseLog(r io.Reader, passEngines []string, res results) error {
	first := map[string]string{} // a test's first logged line
	own, wide := results{}, results{}
	current := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := runLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := logLine.FindStringSubmatch(line); m != nil && current != "" {
			if _, ok := first[current]; !ok {
				first[current] = m[1]
			}
			continue
		}
		m := doneLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := result{outcome: map[string]outcome{"PASS": passed, "FAIL": failed, "SKIP": skipped}[m[1]]}
		if r.outcome == skipped {
			r.reason = first[m[2]]
		}
		key, engine := splitEngine(m[2])
		if engine != "" {
			worst(own, engine, key, r)
			continue
		}
		for _, e := range passEngines {
			worst(wide, e, key, r)
		}
	}
	// What a test did on an engine of its own outweighs what its parent,
	// which names no engine, did on the pass as a whole.
	for _, from := range []results{own, wide} {
		for e, tests := range from {
			for key, r := range tests {
				if _, ok := res[e][key]; !ok {
					worst(res, e, key, r)
				}
			}
		}
	}
	return sc.Err()
}

// worst records r for key on engine e unless a worse outcome is there.
func worst(res results, e, key string, r result) {
	if res[e] == nil {
		res[e] = map[string]result{}
	}
	if old, ok := res[e][key]; !ok || r.outcome > old.outcome {
		res[e][key] = r
	}
}

// notForAll reports whether the test key (or a parent of it) was skipped
// on some engine by the suite's rule of which engines run it (not for a
// limit the engine cannot enforce): a test above the engine, which the
// Docker and Podman pass proves for every engine, or one of another
// engine's own. A pass that runs a list of tests (the gVisor pass) and
// leaves it out would have skipped it too.
func (res results) notForAll(key string) bool {
	for _, tests := range res {
		for k := key; ; {
			if r, ok := tests[k]; ok && r.outcome == skipped && !strings.Contains(r.reason, "cannot enforce") {
				return true
			}
			i := strings.LastIndex(k, "/")
			if i < 0 {
				break
			}
			k = k[:i]
		}
	}
	return false
}

// splitEngine takes the engine's segment out of a test's name:
// "TestConformance/serve/docker" is "TestConformance/serve" on docker.
func splitEngine(name string) (key, engine string) {
	parts := strings.Split(name, "/")
	for i, p := range parts[1:] {
		for _, e := range engines {
			if p == e.name {
				return strings.Join(append(parts[:i+1:i+1], parts[i+2:]...), "/"), e.name
			}
		}
	}
	return name, ""
}
