package integration

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox/kubernetes"
)

// kubeStolenTokenEntersNoRun: the DaemonSet's identity may not exec,
// attach, port-forward into or add a container to a run pod; `bridge
// doctor` in the bridge's pod says it holds nothing beyond its needs, and
// warns of such a permission once it is granted. The API refuses exec into
// a run pod whoever asks (admission.yaml's bridge-run-pods-sealed).
func kubeStolenTokenEntersNoRun(t *testing.T) {
	as := stolenBridgeToken(t)
	// `kubectl auth can-i create pods/exec` asks about a pod named exec:
	// a subresource is --subresource.
	for _, p := range []string{"create pods exec", "get pods exec", "create pods attach", "create pods portforward",
		"update pods ephemeralcontainers", "patch pods ephemeralcontainers", "patch pods", "update pods", "get secrets", "list secrets"} {
		f := strings.Fields(p)
		args := []string{"auth", "can-i", f[0], f[1], "-n", kubernetes.DefaultNamespace}
		if len(f) == 3 {
			args = append(args, "--subresource="+f[2])
		}
		out, _ := as("", args...)
		if strings.TrimSpace(out) != "no" {
			t.Errorf("the bridge's identity may %s in %s: %s", p, kubernetes.DefaultNamespace, out)
		}
	}
	// doctor's JSON, read as any client of it would.
	type check struct {
		Name    string `json:"name"`
		OK      bool   `json:"ok"`
		Warning bool   `json:"warning"`
		Detail  string `json:"detail"`
		Hint    string `json:"hint"`
	}
	extra := func() check {
		t.Helper()
		cmd := exec.Command(kubectlBin(), "-n", "bridge-system", "exec", "daemonset/bridge", "--", "bridge", "doctor", "--runtime", "kubernetes", "--json")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output() // exit 1 when the engine is not usable: the report says why
		var rep struct {
			Engines []struct {
				Reachable bool    `json:"reachable"`
				Checks    []check `json:"checks"`
			} `json:"engines"`
		}
		if jerr := json.Unmarshal(b, &rep); jerr != nil {
			t.Fatalf("doctor in the bridge's pod: %v %v\n%s\n%s", err, jerr, b, stderr.String())
		}
		out := string(b)
		// The pod's service account (~/.kube/config, the other candidate,
		// is not there).
		for _, er := range rep.Engines {
			for _, c := range er.Checks {
				if c.Name == "kubernetes_rbac_extra" && er.Reachable {
					return c
				}
			}
		}
		t.Fatalf("doctor in the bridge's pod checks no extra permission:\n%s", out)
		return check{}
	}
	if c := extra(); !c.OK || c.Warning {
		t.Errorf("doctor with deploy/kubernetes/rbac.yaml: %+v", c)
	}
	// An operator grants more: doctor warns, and exec is still refused.
	grant := `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: too-much, namespace: bridge-runs}
rules:
  - {apiGroups: [""], resources: [pods/exec], verbs: [create, get]}
  - {apiGroups: [""], resources: [pods/ephemeralcontainers], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: too-much, namespace: bridge-runs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: too-much}
subjects: [{kind: ServiceAccount, name: bridge, namespace: bridge-system}]
`
	mustKubectl(t, grant, "apply", "-f", "-")
	defer kubectl(t, grant, "delete", "-f", "-", "--ignore-not-found")
	c := extra()
	if c.OK || !c.Warning || !strings.Contains(c.Detail, "create pods/exec") || !strings.Contains(c.Detail, "patch pods/ephemeralcontainers") || c.Hint == "" {
		t.Errorf("doctor with exec and ephemeral containers granted: %+v", c)
	}
	pods := listRunPods(t, as)
	if len(pods) == 0 {
		t.Fatal("no run pod to try exec on")
	}
	for who, run := range map[string]func(string, ...string) (string, error){
		"the bridge's identity": as,
		"the cluster's admin":   func(stdin string, args ...string) (string, error) { return kubectl(t, stdin, args...) },
	} {
		out, err := run("", "-n", kubernetes.DefaultNamespace, "exec", pods[0].name, "--", "true")
		if err == nil || !strings.Contains(out, "bridge-run-pods-sealed") {
			t.Errorf("%s exec into run pod %s: %v\n%s", who, pods[0].name, err, out)
		}
	}
	out, err := as("", "-n", kubernetes.DefaultNamespace, "debug", pods[0].name, "--image="+imageName(), "--", "true")
	if err == nil || !strings.Contains(out, "bridge-run-pods-sealed") {
		t.Errorf("an ephemeral container added to run pod %s: %v\n%s", pods[0].name, err, out)
	}
}
