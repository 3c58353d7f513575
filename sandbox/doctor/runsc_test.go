//go:build !bridge_no_docker && !bridge_no_podman && !bridge_no_kubernetes

// The runsc engine as a build with every engine has it (its images
// engine: Docker or Podman).
package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

// Doctor on the runsc engine, as a user who is not root and with no engine
// for the images: it says runsc's version, that root is needed and what
// else to use, and that the images' engine does not answer; it opens
// nothing further.
func TestRunscNotRoot(t *testing.T) {
	env := map[string]string{"CONTAINER_HOST": "unix:///nonexistent/podman.sock", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
	rep, err := Run(context.Background(), Options{
		Engine: sandbox.EngineRunsc, Image: "img", Getenv: func(k string) string { return env[k] },
		LookPath: func(string) (string, error) { return "/bin/echo", nil },
		euid:     func() int { return 1000 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Engines) != 2 {
		t.Fatalf("%+v", rep)
	}
	for _, er := range rep.Engines {
		var b strings.Builder
		WriteText(&b, Report{Engines: []EngineReport{er}})
		t.Log(b.String())
		got := map[string]Check{}
		for _, c := range er.Checks {
			got[c.Name] = c
		}
		if c := got["runsc"]; !c.OK || !strings.HasPrefix(c.Detail, "/bin/echo echo") {
			t.Errorf("runsc: %+v", c)
		}
		if c := got["root"]; c.OK || !strings.Contains(c.Detail, "uid 1000") || !strings.Contains(c.Hint, "--oci-runtime runsc") {
			t.Errorf("root: %+v", c)
		}
		if c := got["images_engine"]; c.OK || !strings.Contains(c.Detail, "/nonexistent/") || c.Hint == "" {
			t.Errorf("images_engine: %+v", c)
		}
		if _, ok := got["reachable"]; ok || er.Reachable {
			t.Errorf("opened the engine: %+v", er)
		}
	}
}
