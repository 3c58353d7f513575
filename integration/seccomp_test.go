package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/docker"
)

// userNSKeyringsCode tries what the bridge's seccomp profile refuses: a
// user namespace (every capability over namespaces of its own) and the
// kernel's keyrings (not namespaced). In a forked child: unshare needs a
// process with one thread.
const userNSKeyringsCode = syscallPrelude + `
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    out = ["userns " + sc("unshare", 0x10000000),  # CLONE_NEWUSER
           "keyctl " + sc("keyctl", 0, -3, 1),       # KEYCTL_GET_KEYRING_ID, the session keyring, create
           "add_key " + sc("add_key", b"user", b"bridge", b"x", 1, -3)]
    os.write(w, "\n".join(out).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print(os.read(r, 4096).decode())
`

// TestSeccompEveryBackend: whichever backend the bridge drives and
// whichever engine answers it, a container runs under the bridge's own
// seccomp profile. The Docker backend pointed at Podman's
// Docker-compatible socket (DOCKER_HOST at podman.sock, or a docker.sock
// that is the podman-docker link) used to leave Podman's default profile
// in place, which allows both.
func TestSeccompEveryBackend(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		try := func(t *testing.T, rt sandbox.Runtime) {
			ex, err := sandbox.NewExecutor(context.Background(), rt, sandbox.ExecutorOptions{
				Image: images.Name(), AllowUnenforcedLimits: !e.enforced, Logger: quiet(),
			})
			if err != nil {
				t.Fatal(err)
			}
			l := limits()
			ctx, cancel := context.WithTimeout(context.Background(), l.Timeout+time.Minute)
			defer cancel()
			res, err := ex.Run(ctx, sandbox.Request{Code: userNSKeyringsCode, Limits: l})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Status != sandbox.StatusOK {
				t.Fatalf("status %s (%s)\nstderr:\n%s", res.Status, res.Message, res.Stderr)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				k, v, _ := strings.Cut(line, " ")
				got[k] = v
			}
			for _, k := range []string{"userns", "keyctl", "add_key"} {
				v, ok := got[k]
				if !ok || !slices.Contains(okFailures, v) {
					t.Errorf("%s: %q, want refused (one of %v); output:\n%s", k, v, okFailures, res.Stdout)
				}
			}
		}
		t.Run("own API", func(t *testing.T) { try(t, e.rt) })
		if e.cand.Engine != sandbox.EnginePodman {
			return
		}
		t.Run("Docker API on Podman", func(t *testing.T) {
			d, err := docker.New(context.Background(), e.cand.URI)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if !d.IsPodman() {
				t.Fatalf("the Docker API at %s does not say it is Podman's", e.cand.URI)
			}
			try(t, d)
		})
	})
}
