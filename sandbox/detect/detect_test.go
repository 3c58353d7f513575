//go:build !bridge_no_docker && !bridge_no_podman && !bridge_no_kubernetes

// The detection of every engine, as a build with all of them has it
// (built_test.go: a build without some).

package detect

import (
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

func TestCandidates(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	uris := func(cs []Candidate) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Engine+"="+c.URI)
		}
		return strings.Join(s, " ")
	}
	tests := []struct {
		engine string
		getenv func(string) string
		want   string
	}{
		{"auto", env(), "podman=unix:///run/podman/podman.sock docker=unix:///var/run/docker.sock"},
		{"auto", env("XDG_RUNTIME_DIR", "/run/user/1000"),
			"podman=unix:///run/user/1000/podman/podman.sock podman=unix:///run/podman/podman.sock docker=unix:///var/run/docker.sock"},
		{"podman", env("CONTAINER_HOST", "unix:///run/user/1000/podman/podman.sock", "XDG_RUNTIME_DIR", "/run/user/1000"),
			"podman=unix:///run/user/1000/podman/podman.sock podman=unix:///run/podman/podman.sock"},
		{"docker", env("DOCKER_HOST", "unix:///tmp/d.sock"), "docker=unix:///tmp/d.sock"},
	}
	for _, tt := range tests {
		got, err := Candidates(tt.engine, tt.getenv)
		if err != nil {
			t.Fatal(err)
		}
		if uris(got) != tt.want {
			t.Errorf("Candidates(%s) = %s\nwant %s", tt.engine, uris(got), tt.want)
		}
	}
	if _, err := Candidates("lxc", env()); err == nil || !strings.Contains(err.Error(), "auto, podman, docker, kubernetes or runsc") {
		t.Errorf("unknown engine: err = %v", err)
	}
}

func TestKubeCandidates(t *testing.T) {
	env := map[string]string{"KUBECONFIG": "/etc/k.conf", "HOME": "/home/u"}
	cs, err := Candidates(sandbox.EngineKubernetes, func(k string) string { return env[k] })
	if err != nil || len(cs) != 1 || cs[0].URI != "kubeconfig:/etc/k.conf" {
		t.Fatalf("%+v %v", cs, err)
	}
	env = map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOME": "/home/u"}
	cs, _ = Candidates(sandbox.EngineKubernetes, func(k string) string { return env[k] })
	if len(cs) != 2 || cs[0].URI != "in-cluster" || cs[1].URI != "kubeconfig:/home/u/.kube/config" {
		t.Fatalf("%+v", cs)
	}
	// auto never picks a cluster.
	cs, _ = Candidates(sandbox.EngineAuto, func(k string) string { return env[k] })
	for _, c := range cs {
		if c.Engine == sandbox.EngineKubernetes {
			t.Fatalf("auto tries %+v", c)
		}
	}
}
