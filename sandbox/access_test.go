package sandbox

import (
	"strings"
	"testing"
)

func TestAccessExplain(t *testing.T) {
	docker := socketAccess{known: true, uid: 0, gid: 105, owner: "root", group: "docker", perm: 0o660, self: 1001}
	tests := []struct {
		name      string
		a         socketAccess
		engine    string
		who, hint []string
		not       string
	}{
		{"docker group", docker, EngineDocker,
			[]string{"root:docker, mode 0660"},
			[]string{"add yourself to the `docker` group (`sudo usermod -aG docker $USER`, then log in again)",
				"or use rootless Podman (`systemctl --user enable --now podman.socket`)"}, "start"},
		{"added but not logged in again", func() socketAccess { a := docker; a.member = true; return a }(), EngineDocker,
			nil, []string{"added to the `docker` group after this session began: log in again", "newgrp docker"}, "usermod"},
		{"root only", socketAccess{known: true, owner: "root", group: "root", perm: 0o600, self: 1001}, EnginePodman,
			[]string{"root:root, mode 0600: root only"},
			[]string{"use rootless Podman (`systemctl --user enable --now podman.socket`), or run the bridge as root"}, "group"},
		{"group root is no way in", socketAccess{known: true, owner: "root", group: "root", perm: 0o660, self: 1001}, EnginePodman,
			[]string{"root only"}, []string{"run the bridge as root"}, "group"},
		{"another user's rootless socket", socketAccess{known: true, uid: 1000, gid: 1000, owner: "alice", group: "alice", perm: 0o600, self: 1001}, EnginePodman,
			[]string{"alice:alice, mode 0600: alice's only"}, []string{"use rootless Podman", "run the bridge as alice"}, "as root"},
		{"own socket closed", socketAccess{known: true, uid: 1001, gid: 1001, owner: "me", group: "me", perm: 0o000, self: 1001}, EnginePodman,
			nil, []string{"chmod u+rw /s.sock"}, "rootless"},
		{"mode allows: a security module", func() socketAccess { a := docker; a.member, a.inSession = true, true; return a }(), EngineDocker,
			nil, []string{"security module"}, "usermod"},
		{"directory closed, docker", socketAccess{self: 1001}, EngineDocker,
			nil, []string{"add yourself to the `docker` group", "rootless Podman"}, ""},
		{"directory closed, podman", socketAccess{self: 1001}, EnginePodman,
			nil, []string{"run the bridge as a user who may open /s.sock", "rootless Podman"}, "docker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			who, hint := tt.a.explain(tt.engine, "/s.sock")
			for _, w := range tt.who {
				if !strings.Contains(who, w) {
					t.Errorf("who %q does not say %q", who, w)
				}
			}
			for _, w := range tt.hint {
				if !strings.Contains(hint, w) {
					t.Errorf("hint %q does not say %q", hint, w)
				}
			}
			if tt.not != "" && strings.Contains(hint, tt.not) {
				t.Errorf("hint %q says %q", hint, tt.not)
			}
		})
	}
}
