package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox/kubernetes"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// kubeTestCPUs is each run's CPU on the test cluster: its node has two
// cores, and a run pod asks its limits as requests, so at one core a pod
// each (the default) a warm pool of two would fill the node.
const kubeTestCPUs = "0.25"

// kubeEngine is the suite's kubernetes engine; tests of the cluster's own
// deployment skip without one (make integration runs them in its
// kubernetes pass, where a missing cluster fails the suite).
func kubeEngine(t *testing.T) *engine {
	t.Helper()
	return enginesFor(t, only("it deploys the bridge to the test cluster (make kube-up): the kubernetes pass runs it", kindKubernetes))[0]
}

// kubectl runs the test cluster's kubectl and returns its output.
func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin(), args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// kubectlBin is the test cluster's kubectl.
func kubectlBin() string {
	if bin := os.Getenv("BRIDGE_KUBE_KUBECTL"); bin != "" {
		return bin
	}
	return "kubectl"
}

func mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKubeDaemonSet applies deploy/kubernetes as a user would (with a
// kustomize overlay for this cluster: its kubelet's folder, the bridge's
// image built from this tree, a shared proxy for the upstreams) and
// drives the DaemonSet's bridge with an MCP client over streamable HTTP:
// runs, a tool call through the proxy to server-everything, the hardening
// from inside the pod, a run the admission policy refuses, and then the
// bridge pod deleted mid-life: the one the DaemonSet makes next removes
// what its predecessor left. Everything applied is deleted at the end.
func TestKubeDaemonSet(t *testing.T) {
	kubeEngine(t)
	root := repoRoot()
	kubeletDir := os.Getenv(kubernetes.EnvKubeletDir)
	if kubeletDir == "" {
		t.Fatal("BRIDGE_KUBELET_DIR is not set (kube.env sets it)")
	}

	// The bridge's image, from deploy/kubernetes/Dockerfile, imported
	// into the node's containerd.
	ctxDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ctxDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(testSuite.bridgeBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "bin", "bridge"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("localhost/bridge:test-%d", os.Getpid())
	build := exec.Command("docker", "build", "-q", "-f", filepath.Join(root, "deploy", "kubernetes", "Dockerfile"), "-t", image, ctxDir)
	build.Env = append(os.Environ(), "DOCKER_HOST=unix:///var/run/docker.sock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", image).Run() })
	if out, err := exec.Command("bash", filepath.Join(root, "integration", "kube", "kube.sh"), "import", image).CombinedOutput(); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}

	// The upstreams, behind one proxy on the node's loopback (the bridge
	// pod has the host's network).
	u := startUpstreams(t)
	proxyAddr, _ := startProxy(t, u.config)

	// The bridge's run folder must be a shared mount for the pod's
	// Bidirectional mount (a systemd host's / is shared; this one's is not).
	const runFolder = "/run/bridge-node"
	if err := os.MkdirAll(runFolder, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-c", "mountpoint -q "+runFolder+" || mount --bind "+runFolder+" "+runFolder+"; mount --make-rshared "+runFolder).CombinedOutput(); err != nil {
		t.Fatalf("sharing %s: %v\n%s", runFolder, err, out)
	}
	t.Cleanup(func() {
		// Nothing the bridge pods mounted for their runs is left.
		b, _ := os.ReadFile("/proc/self/mountinfo")
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], runFolder+"/") {
				t.Errorf("a run's mount is left on the node: %s", f[4])
				exec.Command("umount", "-l", f[4]).Run()
			}
		}
		exec.Command("umount", "-l", runFolder).Run()
	})

	overlay := t.TempDir()
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(root, "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	const port = "8181" // the DaemonSet's, here on loopback only
	token := "kube-test-token-" + fmt.Sprint(os.Getpid())
	files := map[string]string{
		"kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: localhost/bridge:dev
    newName: %s
    newTag: %s
patches:
  - path: daemonset.yaml
  - path: policy.yaml
`, base, strings.Split(image, ":")[0], strings.Split(image, ":")[1]),
		"daemonset.yaml": fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: bridge, namespace: bridge-system}
spec:
  template:
    spec:
      containers:
        - name: bridge
          imagePullPolicy: Never
          args: [serve, --runtime=kubernetes, --http=127.0.0.1:%[1]s, --policy=/etc/bridge/policy.yaml, --proxy-url=http://%[2]s/mcp, --drain-timeout=5s]
          env:
            - {name: BRIDGE_KUBELET_DIR, value: %[3]s}
            # No kube-proxy here: the API server's Service address does not
            # route, and its own address on the node's loopback does.
            - {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}
            - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
          readinessProbe:
            httpGet: {path: /readyz, port: %[1]s, host: 127.0.0.1}
          livenessProbe:
            httpGet: {path: /healthz, port: %[1]s, host: 127.0.0.1}
          volumeMounts:
            - {name: seccomp, mountPath: %[3]s/seccomp}
      volumes:
        - name: seccomp
          hostPath: {path: %[3]s/seccomp, type: DirectoryOrCreate}
`, port, proxyAddr, kubeletDir),
		// Two cores: runs of half a core, a pool of one.
		"policy.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: bridge-policy, namespace: bridge-system}
data:
  policy.yaml: |
    version: 1
    sandbox:
      engine: kubernetes
      cpus: 0.5
    pool:
      size: 1
    sessions:
      enabled: true
      idle_timeout: 10m
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(overlay, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	applied := false
	t.Cleanup(func() {
		if !applied {
			return
		}
		if t.Failed() {
			out, _ := kubectl(t, "", "-n", "bridge-system", "logs", "daemonset/bridge", "--tail=80")
			t.Logf("the bridge pod's log:\n%s", out)
		}
		// The DaemonSet first, as docs/kubernetes.md says to uninstall:
		// its bridge drains and removes its run pods while its identity
		// can still reach the API.
		if out, err := kubectl(t, "", "-n", "bridge-system", "delete", "daemonset", "bridge", "--wait=true", "--timeout=120s"); err != nil {
			t.Errorf("deleting the DaemonSet: %v\n%s", err, out)
		}
		kubectl(t, "", "-n", "bridge-system", "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/name=bridge", "--timeout=120s")
		if out, err := kubectl(t, "", "delete", "-k", overlay, "--wait=true", "--timeout=120s", "--ignore-not-found"); err != nil {
			t.Errorf("deleting what the test applied: %v\n%s", err, out)
		}
		// The run namespace went with it; the cluster's other tests use it.
		defer kubectl(t, "", "create", "namespace", kubernetes.DefaultNamespace)
		// The run pods go with the bridge's drain; nothing may be left.
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			out, _ := kubectl(t, "", "get", "pods", "-n", kubernetes.DefaultNamespace, "-o", "name")
			if strings.TrimSpace(out) == "" {
				return
			}
			time.Sleep(time.Second)
		}
		t.Errorf("run pods left after the DaemonSet was deleted")
	})
	// The namespace the engine tests share exists already: apply adopts it.
	applied = true
	mustKubectl(t, "", "apply", "-k", overlay)
	mustKubectl(t, "", "-n", "bridge-system", "create", "secret", "generic", "bridge-http-token", "--from-literal=token="+token)
	mustKubectl(t, "", "-n", "bridge-system", "rollout", "status", "daemonset/bridge", "--timeout=120s")

	endpoint := "http://127.0.0.1:" + port + "/mcp"
	connect := func() *mcp.ClientSession {
		t.Helper()
		var last error
		for range 60 {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "kube-test", Version: "1"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer(token)}}, nil)
			if err == nil {
				listed(t, cs) // as agents do: the session argument's header needs it
				return cs
			}
			last = err
			time.Sleep(time.Second)
		}
		t.Fatalf("connecting to the DaemonSet's bridge at %s: %v", endpoint, last)
		return nil
	}
	cs := connect()
	defer cs.Close()

	// A run, a tool call through the shared proxy to server-everything,
	// and what the code sees of its pod.
	out, _ := runCode(t, cs, `
import errno, os, socket, mcp_tools
print(mcp_tools.call("everything", "echo", message="from a pod"))
print(os.getuid(), os.getgid())
try:
    open("/etc/x", "w")
except OSError as e:
    print("root", errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
except OSError as e:
    print("inet", errno.errorcode[e.errno])
print("token", os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"))
print("KUBERNETES_SERVICE_HOST" in os.environ)
# The kubelet's termination-log file is on the node's disk: not writable.
try:
    open("/dev/termination-log", "w")
except OSError as e:
    print("termination-log", errno.errorcode[e.errno])
`)
	want := "Echo: from a pod\n65534 65534\nroot EROFS\ninet EPERM\ntoken False\nFalse\ntermination-log EACCES\n"
	if out != want {
		t.Fatalf("from the DaemonSet's run pod:\n%s\nwant\n%s", out, want)
	}

	// The run pods are the DaemonSet bridge's: labelled with its pod.
	bridgePod := strings.TrimSpace(mustKubectl(t, "", "-n", "bridge-system", "get", "pods", "-l", "app.kubernetes.io/name=bridge", "-o", "jsonpath={.items[0].metadata.uid}"))
	labelled := mustKubectl(t, "", "-n", kubernetes.DefaultNamespace, "get", "pods", "-l", kubernetes.LabelBridgePod+"="+bridgePod, "-o", "name")
	if strings.TrimSpace(labelled) == "" {
		t.Fatalf("no run pod (the pool's ready one) is labelled with the bridge pod %s", bridgePod)
	}

	// The admission policy refuses a pod in bridge-runs that is not shaped
	// as the bridge makes them, whoever asks.
	// A pod as the bridge makes them, but for one thing each time.
	pod := func(podSC, containerSC, volume, mount string) string {
		return `apiVersion: v1
kind: Pod
metadata: {name: bridge-run-1-2-3, namespace: bridge-runs}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsUser: 65534, runAsGroup: 65534, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}` + podSC + `}
  containers:
    - name: c
      image: ` + imageName() + `
      imagePullPolicy: Never
      command: [sleep, "1"]
      securityContext: {runAsUser: 65534, runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}` + containerSC + `}
      volumeMounts: [{name: v, mountPath: /x` + mount + `}]
  volumes:
    - {name: v, hostPath: {path: ` + volume + `, type: Directory}}
`
	}
	const tmp = "/run/bridge-node/bridge/run-1.2-3.node/tmp"
	for what, p := range map[string]string{
		"the node's /":                        pod("", "", "/", ""),
		"a path through a run's /tmp":         pod("", "", tmp+"/link", ""),
		"seccomp unconfined in the container": pod("", ", seccompProfile: {type: Unconfined}", tmp, ""),
		"the root group":                      pod(", supplementalGroups: [0]", "", tmp, ""),
		"a writable run folder":               pod("", "", "/run/bridge-node/bridge/run-1.2-3", ""),
	} {
		if out, err := kubectl(t, p, "create", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(out, "bridge-run-pods") {
			t.Errorf("a pod with %s was admitted to bridge-runs: %v\n%s", what, err, out)
		}
	}
	if out, err := kubectl(t, pod("", "", tmp, ""), "create", "--dry-run=server", "-f", "-"); err != nil {
		t.Errorf("a pod shaped as the bridge makes them was refused: %v\n%s", err, out)
	}

	// With the bridge's identity, as if its token were stolen: no way into
	// a live run.
	t.Run("a stolen token reads no run's /tmp", func(t *testing.T) { kubeStolenTokenReadsNoRun(t, cs) })
	t.Run("a stolen token enters no run pod", kubeStolenTokenEntersNoRun)

	// The bridge pod dies (deleted at once, no drain): the DaemonSet's next
	// one removes the run pods it left (the pool's ready one), and works.
	cs.Close()
	mustKubectl(t, "", "-n", "bridge-system", "delete", "pods", "-l", "app.kubernetes.io/name=bridge", "--grace-period=0", "--force")
	mustKubectl(t, "", "-n", "bridge-system", "rollout", "status", "daemonset/bridge", "--timeout=120s")
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := mustKubectl(t, "", "-n", kubernetes.DefaultNamespace, "get", "pods", "-l", kubernetes.LabelBridgePod+"="+bridgePod, "-o", "name")
		if strings.TrimSpace(left) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead bridge pod's run pods are still there: %s", left)
		}
		time.Sleep(time.Second)
	}
	cs = connect()
	defer cs.Close()
	if out, _ := runCode(t, cs, "print(6 * 7)"); out != "42\n" {
		t.Fatalf("the new bridge pod's run: %q", out)
	}
}

// bearer is an http.RoundTripper that sends a bearer token.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
