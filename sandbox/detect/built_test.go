package detect

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

// A build may leave engines out (bridge_no_*); make lint tests one without
// any. An engine left out is never tried by auto, and asking for it, or
// connecting to it, says which build tag left it out.
func TestBuiltWithout(t *testing.T) {
	env := func(string) string { return "" }
	auto, err := Candidates(sandbox.EngineAuto, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, engine := range []string{sandbox.EngineDocker, sandbox.EnginePodman, sandbox.EngineKubernetes} {
		tag := "bridge_no_" + engine
		if builtWith(engine) != nil {
			if _, err := Candidates(engine, env); err != nil {
				t.Errorf("%s is built in, but Candidates: %v", engine, err)
			}
			continue
		}
		t.Logf("built without %s", engine)
		if _, err := Candidates(engine, env); err == nil || !strings.Contains(err.Error(), tag) {
			t.Errorf("Candidates(%s) in a build without it: %v, want the build tag %s named", engine, err, tag)
		}
		_, err := Connect(context.Background(), Candidate{Engine: engine, URI: "in-cluster", Why: "test"})
		if err == nil || !strings.Contains(err.Error(), tag) {
			t.Errorf("Connect(%s) in a build without it: %v", engine, err)
		}
		for _, c := range auto {
			if c.Engine == engine {
				t.Errorf("auto tries %s, built without it: %+v", engine, c)
			}
		}
	}
	if _, err := Candidates(sandbox.EngineRunsc, env); (err == nil) != (builtWith(sandbox.EngineDocker) != nil || builtWith(sandbox.EnginePodman) != nil) {
		t.Errorf("Candidates(runsc): %v", err)
	}
	if _, err := Candidates("lxc", env); err == nil || errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Errorf("an unknown engine: %v", err)
	}
}
