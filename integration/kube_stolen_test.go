package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox/kubernetes"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stolenBridgeToken returns a kubectl that acts with a fresh token of the
// DaemonSet's identity (system:serviceaccount:bridge-system:bridge), as if
// it were stolen from the bridge's pod.
func stolenBridgeToken(t *testing.T) func(stdin string, args ...string) (string, error) {
	t.Helper()
	server, ca := os.Getenv("BRIDGE_KUBE_APISERVER"), os.Getenv("BRIDGE_KUBE_CA")
	if server == "" || ca == "" {
		t.Fatal("BRIDGE_KUBE_APISERVER and BRIDGE_KUBE_CA are not set (kube.env sets them)")
	}
	token := strings.TrimSpace(mustKubectl(t, "", "-n", "bridge-system", "create", "token", "bridge", "--duration=1h"))
	kc := filepath.Join(t.TempDir(), "stolen.kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: %s}}]
current-context: x
`, server, ca, token, kubernetes.DefaultNamespace)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(stdin string, args ...string) (string, error) {
		return kubectl(t, stdin, append([]string{"--kubeconfig", kc}, args...)...)
	}
}

// thiefPod is a pod of exactly the shape the admission policy admits
// (deploy/kubernetes/admission.yaml) that mounts hostPath at /x and
// prints /x/secret.
func thiefPod(name, hostPath string) string {
	return `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: bridge-runs}
spec:
  nodeName: ` + os.Getenv("BRIDGE_KUBE_NODE") + `
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext: {runAsUser: 65534, runAsGroup: 65534, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: c
      image: ` + imageName() + `
      imagePullPolicy: Never
      command: [cat, /x/secret]
      securityContext: {runAsUser: 65534, runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: v, mountPath: /x}]
  volumes:
    - {name: v, hostPath: {path: ` + hostPath + `, type: Directory}}
`
}

// kubeRunPod is a live run pod as the bridge's identity lists it.
type kubeRunPod struct{ name, uid, tmp string }

func listRunPods(t *testing.T, as func(string, ...string) (string, error)) []kubeRunPod {
	t.Helper()
	out, err := as("", "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.uid}{" "}{.spec.volumes[?(@.name=="tmp")].hostPath.path}{"\n"}{end}`)
	if err != nil {
		t.Fatalf("the bridge's identity lists the run pods: %v", err)
	}
	var pods []kubeRunPod
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			pods = append(pods, kubeRunPod{f[0], f[1], f[2]})
		}
	}
	return pods
}

// thiefOutcome waits until the pod name has ended, cannot mount its
// volume, or is gone, and returns its output when it ran, else what
// became of it.
func thiefOutcome(t *testing.T, name string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		phase, err := kubectl(t, "", "-n", kubernetes.DefaultNamespace, "get", "pod", name, "-o", "jsonpath={.status.phase}")
		if err != nil && strings.Contains(phase, "NotFound") {
			return "(no output: the pod was deleted before it ran)"
		}
		if phase == "Succeeded" || phase == "Failed" {
			out, _ := kubectl(t, "", "-n", kubernetes.DefaultNamespace, "logs", name)
			return out
		}
		evs, _ := kubectl(t, "", "-n", kubernetes.DefaultNamespace, "get", "events", "--field-selector", "involvedObject.name="+name, "-o", "jsonpath={.items[*].reason}")
		if strings.Contains(evs, "FailedMount") {
			msg, _ := kubectl(t, "", "-n", kubernetes.DefaultNamespace, "get", "events", "--field-selector", "involvedObject.name="+name+",reason=FailedMount", "-o", "jsonpath={.items[0].message}")
			return "(no output: FailedMount: " + msg + ")"
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("pod %s neither ran nor failed to mount in 90 s", name)
	return ""
}

// kubeStolenTokenReadsNoRun: with the DaemonSet's identity, as if its
// token were stolen, no pod reads what a live run wrote in its /tmp: a
// pod of exactly the admitted shape that mounts another run's folders is
// refused (a run's folders are the pod's that is named after them), the
// node holds no path to a live run's /tmp, and a pod that takes a run's
// name (and so its folders) once that run's pod is deleted finds nothing.
func kubeStolenTokenReadsNoRun(t *testing.T, cs *mcp.ClientSession) {
	secret := fmt.Sprintf("secret-of-a-run-%d", os.Getpid())
	// A session's pod lives on after its run; its host name is its name.
	out, text := sessionCall(t, cs, map[string]any{"code": "import socket\nopen('/tmp/secret', 'w').write(" + fmt.Sprintf("%q", secret) + ")\nprint(socket.gethostname())", "session": "victim"})
	if out.Status != "ok" {
		t.Fatalf("the victim's run: %+v %s", out, text)
	}
	as := stolenBridgeToken(t)
	pods := listRunPods(t, as)
	var victim *kubeRunPod
	for i := range pods {
		if pods[i].name == strings.TrimSpace(out.Stdout) {
			victim = &pods[i]
		}
	}
	if victim == nil {
		t.Fatalf("the bridge's identity lists no pod %q (the session's): %+v", out.Stdout, pods)
	}
	// The node has no path that leads to the /tmp of a run that has
	// started (a pod that is starting has one, held by its name).
	if _, err := os.Stat(victim.tmp); !os.IsNotExist(err) {
		t.Errorf("run pod %s's /tmp is reachable on the node at %s (%v)", victim.name, victim.tmp, err)
	}
	for i, p := range pods {
		thief := "bridge-run-9" + fmt.Sprint(i)
		for _, name := range []string{"thief", thief} {
			out, err := as(thiefPod(name, p.tmp), "create", "-f", "-")
			if err == nil {
				t.Errorf("a pod %s mounting run pod %s's /tmp was admitted; it read %q", name, p.name, thiefOutcome(t, name))
				kubectl(t, "", "-n", kubernetes.DefaultNamespace, "delete", "pod", name, "--grace-period=0", "--force", "--wait=true")
			} else if !strings.Contains(out, "bridge-run-pods") {
				t.Errorf("a pod mounting run pod %s's /tmp was refused, but not by the admission policy: %s", p.name, out)
			}
		}
	}
	// The session's pod is deleted, and a pod takes its name and folders.
	if out, err := as("", "delete", "pod", victim.name, "--grace-period=0", "--force", "--wait=true"); err != nil {
		t.Fatalf("deleting the session's pod: %v\n%s", err, out)
	}
	// The policy admits it (its name is its folders'), but the node has
	// no path to the run's /tmp any more: it cannot mount it, or (the
	// bridge removing what has its run's name) is gone.
	if out, err := as(thiefPod(victim.name, victim.tmp), "create", "-f", "-"); err == nil {
		got := thiefOutcome(t, victim.name)
		if strings.Contains(got, secret) {
			t.Errorf("a pod that took the name of the deleted run pod %s read its /tmp: %q", victim.name, got)
		}
		t.Logf("a pod that took the name of the deleted run pod %s was admitted, and read %q", victim.name, got)
	} else if !strings.Contains(out, "bridge-run-pods") {
		t.Errorf("a pod with the deleted run's name: %v\n%s", err, out)
	}
	kubectl(t, "", "-n", kubernetes.DefaultNamespace, "delete", "pod", victim.name, "--grace-period=0", "--force", "--ignore-not-found", "--wait=true")
}
