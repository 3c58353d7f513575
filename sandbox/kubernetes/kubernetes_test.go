package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/enginetest"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeNode records what the engine asks of its node.
type fakeNode struct {
	mu      sync.Mutex
	calls   []string
	pidsOK  bool
	mountEr error
}

func (n *fakeNode) add(s string) { n.mu.Lock(); n.calls = append(n.calls, s); n.mu.Unlock() }
func (n *fakeNode) mountTmp(dir string, size int64) error {
	n.add("tmpfs " + filepath.Base(dir))
	return n.mountEr
}
func (n *fakeNode) bindReadOnly(src, dir string) error {
	n.add("bind " + src + " " + filepath.Base(dir))
	return nil
}
func (n *fakeNode) unmount(dir string) error { n.add("unmount " + filepath.Base(dir)); return nil }
func (n *fakeNode) setPids(uid, cid string, limit int64) error {
	n.add("pids " + cid)
	return nil
}
func (n *fakeNode) canSetPids() (bool, string) { return n.pidsOK, "not root" }
func (n *fakeNode) log() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.calls, "; ")
}

func newFakeKube(t *testing.T, objs ...any) (*Client, *fake.Clientset, *fakeNode) {
	t.Helper()
	t.Setenv(EnvNode, "node-a")
	t.Setenv(EnvNamespace, "runs")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{
		Images: []corev1.ContainerImage{{Names: []string{"docker.io/library/bridge-runner:abc", "sha256:1"}, SizeBytes: 99}},
	}}
	cs := fake.NewClientset(node, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "runs"}})
	n := &fakeNode{pidsOK: true}
	k := newClient(clientsetAPI{cs}, "test", "https://127.0.0.1:6443", n)
	if err := k.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return k, cs, n
}

func kubeSpec(t *testing.T) sandbox.ContainerSpec {
	t.Helper()
	run := t.TempDir()
	l := sandbox.DefaultLimits()
	sales := filepath.Join(run, "sales")
	if err := os.Mkdir(sales, 0o755); err != nil {
		t.Fatal(err)
	}
	l.Mounts = []sandbox.DataMount{{Host: sales, Path: "/data/sales"}}
	spec := sandbox.NewSpec("abc123", "bridge-runner:abc", filepath.Join(run, "run-1"), "tok", l)
	spec.Labels[sandbox.LabelOwner] = "host/boot/pid:[4026531836]/42/1234"
	if err := os.Mkdir(filepath.Join(run, "run-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestKubePodIsHardened(t *testing.T) {
	k, _, _ := newFakeKube(t)
	k.seccomp = "bridge-mcp/seccomp-x.json"
	spec := kubeSpec(t)
	pod, err := k.podFor(spec)
	if err != nil {
		t.Fatal(err)
	}
	ps := pod.Spec
	c := ps.Containers[0]
	sc := c.SecurityContext
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	vols := map[string]corev1.Volume{}
	hostPaths := true
	for _, v := range ps.Volumes {
		vols[v.Name] = v
		hostPaths = hostPaths && v.HostPath != nil
	}
	hostPath := func(at string) string {
		if v := vols[mounts[at].Name]; v.HostPath != nil {
			return v.HostPath.Path
		}
		return ""
	}
	relay := spec.Mounts[0].Source
	plan := planOf(pod)
	res := c.Resources
	is := func(p enginetest.Property, name string, ok bool) enginetest.Check {
		return enginetest.Check{Property: p, Name: name, Holds: func(*testing.T) error { return enginetest.Want(ok, "not so") }}
	}
	checks := []enginetest.Check{
		is(enginetest.Image, "", c.Image == spec.Image && slices.Equal(c.Command, spec.Command) && len(c.Args) == 0),
		is(enginetest.Nobody, "pod runs as 65534", *ps.SecurityContext.RunAsUser == 65534 && *ps.SecurityContext.RunAsGroup == 65534 && *ps.SecurityContext.RunAsNonRoot),
		is(enginetest.Nobody, "container runs as 65534", *sc.RunAsUser == 65534 && *sc.RunAsGroup == 65534 && *sc.RunAsNonRoot),
		is(enginetest.ReadOnlyRoot, "", *sc.ReadOnlyRootFilesystem),
		is(enginetest.NoNetwork, "no IP sockets, no host network", envOf(c, EnvNoInet) == "1" && !ps.HostNetwork),
		is(enginetest.NoCapability, "", len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL" && len(sc.Capabilities.Add) == 0),
		is(enginetest.NoEscalation, "", !*sc.AllowPrivilegeEscalation && !*sc.Privileged),
		is(enginetest.Seccomp, "", sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost && *sc.SeccompProfile.LocalhostProfile == k.seccomp),
		is(enginetest.Memory, "memory: requests equal limits", res.Requests.Memory().Value() == 512<<20 && res.Limits.Memory().Value() == 512<<20),
		is(enginetest.CPU, "CPU: requests equal limits", res.Limits.Cpu().MilliValue() == 1000 && res.Requests.Cpu().MilliValue() == 1000),
		is(enginetest.Pids, "the node plan sets the runner's pids.max", plan.Pids == 128),
		is(enginetest.Rlimits, "the runner lowers its own", envOf(c, EnvRlimits) == "nofile=1024:1024,nproc=4096:4096"),
		is(enginetest.TmpNoExec, "the node plan mounts it (mountTmp: TestLinuxNodeMounts)", !mounts[sandbox.TmpDir].ReadOnly && hostPath(sandbox.TmpDir) == nodeDir(relay)+"/tmp" && plan.Tmpfs == 64<<20),
		is(enginetest.RelayReadOnly, "", mounts[sandbox.RelayDir].ReadOnly && hostPath(sandbox.RelayDir) == relay),
		is(enginetest.OnlyMounts, "", len(mounts) == 3 && hostPaths && hostPath("/data/sales") == nodeDir(relay)+"/data-0" && len(plan.Data) == 1 && plan.Dir == nodeDir(relay)),
		is(enginetest.Init, "", ps.ShareProcessNamespace != nil && *ps.ShareProcessNamespace),
		is(enginetest.Env, "relay token in env", envOf(c, sandbox.EnvRelayToken) == "tok"),
		is(enginetest.Env, "no API address", envOf(c, EnvDrop) == "KUBERNETES_"),
		is(enginetest.Env, "no service links", ps.EnableServiceLinks != nil && !*ps.EnableServiceLinks),
		is(enginetest.Labels, "labels that fit are labels", pod.Labels[sandbox.LabelManaged] == "true" && pod.Labels[sandbox.LabelRunID] == "abc123"),
		is("", "the owner is an annotation", strings.Contains(pod.Annotations[kubeLabelsAnnotation], "pid:[4026531836]") && pod.Labels[sandbox.LabelOwner] == ""),
		is("", "pinned to the node", ps.NodeName == "node-a"),
		is("", "never restarts", ps.RestartPolicy == corev1.RestartPolicyNever),
		is("", "no service account token", ps.AutomountServiceAccountToken != nil && !*ps.AutomountServiceAccountToken),
		is("", "no host namespaces", !ps.HostNetwork && !ps.HostPID && !ps.HostIPC),
		is("", "never pulls", c.ImagePullPolicy == corev1.PullNever),
		is("", "the data mount is the node's read-only clone", !mounts["/data/sales"].ReadOnly && hostPath("/data/sales") == nodeDir(relay)+"/data-0"),
	}
	enginetest.Hardening(t, "kubernetes", checks, map[enginetest.Property]string{
		enginetest.OCIRuntime: "a RuntimeClass whose handler is runsc: TestKubeRuntimeClass",
	})
	if t.Failed() {
		t.Logf("pod: %+v", pod)
	}

	k.seccomp = ""
	pod, _ = k.podFor(spec)
	if sp := pod.Spec.Containers[0].SecurityContext.SeccompProfile; sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("without the bridge's profile installed: %+v", sp)
	}
}

// A run pod is named after its run folder, the one name the admission
// policy admits for that folder's hostPaths.
func TestKubePodNamedAfterItsRunFolder(t *testing.T) {
	k, _, _ := newFakeKube(t)
	spec := kubeSpec(t)
	for dir, want := range map[string]string{
		"/run/bridge-node/bridge/run-1.8812-4410571":             "bridge-run-1-8812-4410571",
		"/run/user/0/bridge/run-77":                              "bridge-run-77",
		"/run/bridge-node/bridge/abc":                            "",
		"/run/bridge-node/bridge/run-1.2-x":                      "",
		"/run/bridge-node/bridge/run-" + strings.Repeat("1", 60): "",
	} {
		spec.Mounts[0].Source = dir
		pod, err := k.podFor(spec)
		switch {
		case want == "" && err == nil:
			t.Errorf("%s named a pod %s", dir, pod.Name)
		case want != "" && (err != nil || pod.Name != want):
			t.Errorf("%s: pod %v, %v; want %s", dir, pod, err, want)
		}
	}
}

// A pod deleted and made anew under its name by someone else while it
// starts is not the bridge's: Start fails, and its node mounts go.
func TestKubeStartRefusesAReplacedPod(t *testing.T) {
	k, cs, n := newFakeKube(t)
	ctx := context.Background()
	spec := kubeSpec(t)
	id, err := k.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range 200 {
			p, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{})
			if err == nil {
				p.UID = "another"
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kubeContainer, ContainerID: "containerd://evil",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
				if _, err := cs.CoreV1().Pods("runs").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err == nil {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := k.Start(sctx, id); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("start of a replaced pod: %v", err)
	}
	if strings.Contains(n.log(), "pids evil") {
		t.Fatalf("the bridge set the limits of another pod: %s", n.log())
	}
	if err := k.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nodeDir(spec.Mounts[0].Source)); !os.IsNotExist(err) {
		t.Fatalf("the node folder is left: %v", err)
	}
}

// A runner is confirmed only from the pod Start made: not from one that
// took its name once it was deleted (the relay token is in the spec).
func TestKubeConfirmsOnlyItsOwnPod(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	ctx := context.Background()
	spec := kubeSpec(t)
	id, _ := k.Create(ctx, spec)
	kubelet(t, cs, id, corev1.ContainerStatus{Name: kubeContainer, ContainerID: "containerd://c3",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	if err := k.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := k.Confirm(ctx, id); err != nil {
		t.Fatalf("the bridge's own pod: %v", err)
	}
	twin, _ := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{})
	if err := cs.CoreV1().Pods("runs").Delete(ctx, id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Confirm(ctx, id); err == nil {
		t.Fatal("a deleted pod confirmed")
	}
	twin.UID, twin.ResourceVersion = "another", ""
	if _, err := cs.CoreV1().Pods("runs").Create(ctx, twin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Confirm(ctx, id); err == nil || !strings.Contains(err.Error(), "did not start") {
		t.Fatalf("a pod that took the name: %v", err)
	}
	if err := k.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := k.Confirm(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a removed pod: %v", err)
	}
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestKubeRefusesWhatAPodCannotHold(t *testing.T) {
	k, _, _ := newFakeKube(t)
	for name, edit := range map[string]func(*sandbox.ContainerSpec){
		"network":       func(s *sandbox.ContainerSpec) { s.NetworkNone = false },
		"root":          func(s *sandbox.ContainerSpec) { s.User = "0:0" },
		"writable root": func(s *sandbox.ContainerSpec) { s.ReadOnlyRoot = false },
		"another mount": func(s *sandbox.ContainerSpec) {
			s.Mounts = append(s.Mounts, sandbox.Mount{Source: "/etc", Target: "/etc2"})
		},
		"gVisor, absent": func(s *sandbox.ContainerSpec) { s.OCIRuntime = "runsc" },
	} {
		s := kubeSpec(t)
		edit(&s)
		if _, err := k.Create(context.Background(), s); err == nil {
			t.Errorf("%s: created", name)
		} else if name == "gVisor, absent" && !errors.Is(err, sandbox.ErrOCIRuntime) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestKubeRuntimeClass(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	if _, err := cs.NodeV1().RuntimeClasses().Create(context.Background(), &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := k.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.OCIRuntimes["runsc"]; !ok {
		t.Fatalf("runtimes %+v", info.OCIRuntimes)
	}
	req, eff, err := sandbox.ResolveOCIRuntime(info, "runsc")
	if err != nil || req != "runsc" || eff != "runsc" {
		t.Fatalf("resolve runsc: %q %q %v", req, eff, err)
	}
	s := kubeSpec(t)
	s.OCIRuntime = req
	pod, err := k.podFor(s)
	if err != nil || pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "gvisor" {
		t.Fatalf("pod %+v, %v", pod, err)
	}
	if !info.Enforce.All() {
		t.Fatalf("enforce %+v", info.Enforce)
	}
}

func TestKubeInfoPidsNotRoot(t *testing.T) {
	k, _, n := newFakeKube(t)
	n.pidsOK = false
	info, err := k.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Enforce.Pids || !info.Enforce.Memory || !info.Enforce.CPU || !strings.Contains(info.Enforce.Reason, "not root") {
		t.Fatalf("enforce %+v", info.Enforce)
	}
}

// kubelet plays the node's kubelet for one pod: once it exists, it
// reports the container in state (running, or waiting for a reason).
func kubelet(t *testing.T, cs *fake.Clientset, name string, status corev1.ContainerStatus) {
	t.Helper()
	go func() {
		for range 200 {
			p, err := cs.CoreV1().Pods("runs").Get(context.Background(), name, metav1.GetOptions{})
			if err == nil {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{status}
				p.Status.Phase = corev1.PodRunning
				if _, err := cs.CoreV1().Pods("runs").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err == nil {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func TestKubeLifecycle(t *testing.T) {
	k, cs, n := newFakeKube(t)
	ctx := context.Background()
	spec := kubeSpec(t)
	id, err := k.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{}); err == nil {
		t.Fatal("Create posted the pod: it would run before Start")
	}
	kubelet(t, cs, id, corev1.ContainerStatus{Name: kubeContainer, ContainerID: "containerd://c0ffee",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	if err := k.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Once the runner's container holds /tmp and the data mounts, the
	// node's copies go: nothing on the node leads to them any more.
	if got, want := n.log(), "tmpfs tmp; bind "+spec.DataMounts[0].Host+" data-0; pids c0ffee; unmount data-0; unmount tmp"; got != want {
		t.Fatalf("node: %s, want %s", got, want)
	}
	if _, err := os.Stat(nodeDir(spec.Mounts[0].Source)); !os.IsNotExist(err) {
		t.Fatalf("the node folder is still there once the pod started: %v", err)
	}
	list, err := k.List(ctx, map[string]string{sandbox.LabelManaged: "true", sandbox.LabelOwner: spec.Labels[sandbox.LabelOwner]})
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Labels[sandbox.LabelOwner] != spec.Labels[sandbox.LabelOwner] {
		t.Fatalf("list: %+v %v", list, err)
	}
	if list, _ := k.List(ctx, map[string]string{sandbox.LabelOwner: "someone/else"}); len(list) != 0 {
		t.Fatalf("list of another owner: %+v", list)
	}

	// The kubelet reports the OOM kill.
	waited := make(chan sandbox.ExitState, 1)
	go func() {
		st, err := k.Wait(ctx, id)
		if err != nil {
			t.Error(err)
		}
		waited <- st
	}()
	p, _ := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{})
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}
	if _, err := cs.CoreV1().Pods("runs").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-waited:
		if !st.OOMKilled || st.ExitCode != 137 {
			t.Fatalf("exit %+v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not see the end")
	}

	if err := k.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{}); err == nil {
		t.Fatal("the pod is still there")
	}
	if !strings.Contains(n.log(), "unmount tmp") || !strings.Contains(n.log(), "unmount data-0") {
		t.Fatalf("node: %s", n.log())
	}
	if _, err := os.Stat(nodeDir(spec.Mounts[0].Source)); !os.IsNotExist(err) {
		t.Fatalf("the node folder is left: %v", err)
	}
	if err := k.Remove(ctx, id); err != nil {
		t.Fatalf("removing a removed pod: %v", err)
	}
}

func TestKubeImageNeverPulled(t *testing.T) {
	k, cs, n := newFakeKube(t)
	ctx := context.Background()
	spec := kubeSpec(t)
	id, _ := k.Create(ctx, spec)
	kubelet(t, cs, id, corev1.ContainerStatus{Name: kubeContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ErrImageNeverPull", Message: `Container image "bridge-runner:abc" is not present with pull policy of Never`}}})
	err := k.Start(ctx, id)
	if !errors.Is(err, sandbox.ErrImageNotFound) || !strings.Contains(err.Error(), "not present") {
		t.Fatalf("start: %v", err)
	}
	if err := k.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nodeDir(spec.Mounts[0].Source)); !os.IsNotExist(err) {
		t.Fatalf("the node folder is left: %v (%s)", err, n.log())
	}
}

func TestKubeStartTimesOutWithEvents(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	spec := kubeSpec(t)
	id, _ := k.Create(context.Background(), spec)
	if _, err := cs.CoreV1().Events("runs").Create(context.Background(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e1"},
		InvolvedObject: corev1.ObjectReference{Name: id, Namespace: "runs"},
		Type:           corev1.EventTypeWarning, Reason: "FailedScheduling", Message: "0/1 nodes are available: 1 Insufficient memory.",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := k.Start(ctx, id)
	if err == nil || !strings.Contains(err.Error(), "did not start in time") || !strings.Contains(err.Error(), "Insufficient memory") {
		t.Fatalf("start: %v", err)
	}
	_ = k.Remove(context.Background(), id)
}

func TestKubeMountFailureUndoes(t *testing.T) {
	k, cs, n := newFakeKube(t)
	n.mountEr = errors.New("operation not permitted")
	spec := kubeSpec(t)
	id, _ := k.Create(context.Background(), spec)
	err := k.Start(context.Background(), id)
	if err == nil || !strings.Contains(err.Error(), "as root on the node") {
		t.Fatalf("start: %v", err)
	}
	if _, err := cs.CoreV1().Pods("runs").Get(context.Background(), id, metav1.GetOptions{}); err == nil {
		t.Fatal("a pod was posted without its /tmp")
	}
	if _, err := os.Stat(nodeDir(spec.Mounts[0].Source)); !os.IsNotExist(err) {
		t.Fatalf("the node folder is left: %v", err)
	}
}

func TestKubeImageInfo(t *testing.T) {
	k, _, _ := newFakeKube(t)
	if _, err := k.ImageInfo(context.Background(), "bridge-runner:abc"); err != nil {
		t.Fatal(err)
	}
	_, err := k.ImageInfo(context.Background(), "bridge-runner:other")
	if !errors.Is(err, sandbox.ErrImageNotFound) || !strings.Contains(err.Error(), "node node-a holds no image bridge-runner:other") {
		t.Fatalf("missing image: %v", err)
	}
}

func TestNormalizeImageRef(t *testing.T) {
	for in, want := range map[string]string{
		"bridge-runner:abc":                  "docker.io/library/bridge-runner:abc",
		"bridge-runner":                      "docker.io/library/bridge-runner:latest",
		"me/runner:1":                        "docker.io/me/runner:1",
		"localhost/bridge-runner:abc":        "localhost/bridge-runner:abc",
		"registry.local:5000/x/y":            "registry.local:5000/x/y:latest",
		"docker.io/library/python:3.11":      "docker.io/library/python:3.11",
		"python@sha256:0123":                 "docker.io/library/python@sha256:0123",
		"registry.local:5000/x/y:2@sha256:1": "registry.local:5000/x/y:2@sha256:1",
	} {
		if got := normalizeImageRef(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

func TestKubeLabelsRoundTrip(t *testing.T) {
	k, _, _ := newFakeKube(t)
	spec := kubeSpec(t)
	pod, _ := k.podFor(spec)
	var back map[string]string
	if err := json.Unmarshal([]byte(pod.Annotations[kubeLabelsAnnotation]), &back); err != nil || len(back) != len(spec.Labels) {
		t.Fatalf("%v %v", back, err)
	}
}

func TestKubeMissingPermissions(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	// The API server allows everything but deleting pods and listing
	// RuntimeClasses.
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := r.Spec.ResourceAttributes
		r.Status.Allowed = !(attr.Verb == "delete" && attr.Resource == "pods" && attr.Namespace == "runs") &&
			!(attr.Resource == "runtimeclasses" && attr.Group == "node.k8s.io")
		return true, r, nil
	})
	missing, err := k.Missing(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 2 || missing[0].String() != "delete pods" || missing[1].String() != "list runtimeclasses" || !missing[1].Optional {
		t.Fatalf("missing %+v", missing)
	}
}

// Extra names the dangerous permissions the identity holds beyond its
// needs: here exec into pods and ephemeral containers in the run
// namespace, and creating pods in the bridge's own namespace.
func TestKubeExtraPermissions(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	k.ownNS = "bridge-system"
	var asked []string
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := r.Spec.ResourceAttributes
		asked = append(asked, attr.Verb+" "+attr.Resource+"/"+attr.Subresource+" "+attr.Namespace)
		switch {
		case attr.Namespace == "runs" && attr.Resource == "pods" && attr.Subresource == "exec" && attr.Verb == "create",
			attr.Namespace == "runs" && attr.Resource == "pods" && attr.Subresource == "ephemeralcontainers" && attr.Verb == "patch",
			attr.Namespace == "bridge-system" && attr.Resource == "pods" && attr.Subresource == "" && attr.Verb == "create":
			r.Status.Allowed = true
		}
		return true, r, nil
	})
	extra, err := k.Extra(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range extra {
		got = append(got, p.String())
		if p.Why == "" {
			t.Errorf("%s: no reason", p)
		}
	}
	want := "create pods/exec, patch pods/ephemeralcontainers, create pods in namespace bridge-system"
	if strings.Join(got, ", ") != want {
		t.Fatalf("extra: %s, want %s (asked %v)", strings.Join(got, ", "), want, asked)
	}
	// Cluster-wide questions name no namespace.
	for _, a := range asked {
		if strings.HasPrefix(a, "create pods/ ") && !strings.Contains(a, "runs") && !strings.Contains(a, "bridge-system") {
			return
		}
	}
	t.Errorf("creating pods in every namespace was not asked: %v", asked)
}

// A node without room rejects the pod (OutOfcpu); once a place frees up,
// the pod is made again and starts.
func TestKubeNoRoomWaitsForAPlace(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := kubeSpec(t)
	id, _ := k.Create(ctx, spec)
	go func() {
		for attempt := 0; ctx.Err() == nil; {
			p, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{})
			if err != nil || p.Status.Phase != "" {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			attempt++
			if attempt < 3 {
				p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "OutOfcpu", "Node didn't have enough resource: cpu"
			} else {
				p.Status.Phase = corev1.PodRunning
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kubeContainer, ContainerID: "containerd://c1",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			}
			if _, err := cs.CoreV1().Pods("runs").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
			if attempt >= 3 {
				return
			}
		}
	}()
	if err := k.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	p, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %+v %v", p, err)
	}
	_ = k.Remove(ctx, id)

	// No room ever: the start timeout ends it, with the reason, also when
	// it ends while a try after a rejection is made or watched (where a
	// fixed timeout happens to end depends on the machine's speed). The
	// node rejects the first two pods; the timeout ends (the start's ctx
	// is cancelled) once the third is made, not answered yet.
	id, _ = k.Create(ctx, kubeSpec(t))
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { scancel(); <-done }()
	go func() {
		defer close(done)
		defer scancel()
		// Each pod seen without a phase is a new one: the ones before
		// were rejected at once.
		for seen := 0; sctx.Err() == nil; {
			p, err := cs.CoreV1().Pods("runs").Get(sctx, id, metav1.GetOptions{})
			if err != nil || p.Status.Phase != "" {
				time.Sleep(time.Millisecond)
				continue
			}
			if seen++; seen == 3 {
				return
			}
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "OutOfmemory", "Node didn't have enough resource: memory"
			if _, err := cs.CoreV1().Pods("runs").UpdateStatus(sctx, p, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}
	}()
	err = k.Start(sctx, id)
	if err == nil || !strings.Contains(err.Error(), "no room") || !strings.Contains(err.Error(), "OutOfmemory") {
		t.Fatalf("start on a full node: %v", err)
	}
}

// A node without room asks Start's caller, at each rejection, whether it
// takes a container it holds instead (the warm pool's): when it does,
// Start gives up at once with ErrNoRoom, the rejected pod gone.
func TestKubeNoRoomAsksTheCaller(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, _ := k.Create(ctx, kubeSpec(t))
	go func() {
		for ctx.Err() == nil {
			p, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{})
			if err != nil || p.Status.Phase != "" {
				time.Sleep(time.Millisecond)
				continue
			}
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "OutOfcpu", "Node didn't have enough resource: cpu"
			if _, err := cs.CoreV1().Pods("runs").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}
	}()
	var reasons []string
	err := k.Start(sandbox.WithNoRoom(ctx, func(reason string) bool {
		reasons = append(reasons, reason)
		return len(reasons) == 2
	}), id)
	if !errors.Is(err, sandbox.ErrNoRoom) || ctx.Err() != nil {
		t.Fatalf("start, the caller taking another container at the second rejection: %v (ctx: %v)", err, ctx.Err())
	}
	if len(reasons) != 2 || !strings.Contains(reasons[0], "OutOfcpu") {
		t.Errorf("the caller was asked %q; want twice, with the node's reason", reasons)
	}
	if _, err := cs.CoreV1().Pods("runs").Get(ctx, id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the rejected pod after Start gave up: %v; want it gone", err)
	}
	if err := k.Remove(ctx, id); err != nil {
		t.Errorf("remove after Start gave up: %v", err)
	}
}

// A DaemonSet's bridge pod removes, at start, the run pods on its node
// that an earlier bridge pod made, and no others.
func TestKubeReapsEarlierBridgePods(t *testing.T) {
	k, cs, n := newFakeKube(t)
	ctx := context.Background()
	mk := func(name, node string, labels map[string]string) {
		t.Helper()
		_, err := cs.CoreV1().Pods("runs").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "runs", Labels: labels},
			Spec: corev1.PodSpec{NodeName: node}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	mk("old", "node-a", map[string]string{sandbox.LabelManaged: "true", LabelBridgePod: "uid-1"})
	mk("mine", "node-a", map[string]string{sandbox.LabelManaged: "true", LabelBridgePod: "uid-2"})
	mk("host-bridge", "node-a", map[string]string{sandbox.LabelManaged: "true"})
	k.podUID = "uid-2"
	if err := k.reapBridgePods(ctx); err != nil {
		t.Fatal(err)
	}
	left, _ := cs.CoreV1().Pods("runs").List(ctx, metav1.ListOptions{})
	var names []string
	for _, p := range left.Items {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "host-bridge,mine" {
		t.Fatalf("left %v (node: %s)", names, n.log())
	}
	pod, _ := k.podFor(kubeSpec(t))
	if pod.Labels[LabelBridgePod] != "uid-2" {
		t.Fatalf("labels %v", pod.Labels)
	}
}

// A pod deleted by someone else (its namespace deleted) still has its
// node mounts undone when the bridge removes it.
func TestKubeRemoveGonePodUndoesMounts(t *testing.T) {
	k, cs, n := newFakeKube(t)
	ctx := context.Background()
	spec := kubeSpec(t)
	id, _ := k.Create(ctx, spec)
	kubelet(t, cs, id, corev1.ContainerStatus{Name: kubeContainer, ContainerID: "containerd://c2",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	if err := k.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("runs").Delete(ctx, id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(n.log(), "unmount tmp") {
		t.Fatalf("node: %s", n.log())
	}
	if _, err := os.Stat(nodeDir(spec.Mounts[0].Source)); !os.IsNotExist(err) {
		t.Fatalf("the node folder is left: %v", err)
	}
	if len(k.started) != 0 {
		t.Fatalf("still kept: %v", k.started)
	}
}

// clientsetAPI is kubeAPI over client-go's clientset: the fake one, for
// these tests (the engine's own goes over REST clients).
type clientsetAPI struct{ cs *fake.Clientset }

func (a clientsetAPI) ServerVersion(ctx context.Context) (string, error) {
	v, err := a.cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}
func (a clientsetAPI) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return a.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}
func (a clientsetAPI) Namespace(ctx context.Context, name string) error {
	_, err := a.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	return err
}
func (a clientsetAPI) CreatePod(ctx context.Context, ns string, p *corev1.Pod) (*corev1.Pod, error) {
	return a.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
}
func (a clientsetAPI) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return a.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}
func (a clientsetAPI) Pods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	return a.cs.CoreV1().Pods(ns).List(ctx, opts)
}
func (a clientsetAPI) WatchPods(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	return a.cs.CoreV1().Pods(ns).Watch(ctx, opts)
}
func (a clientsetAPI) DeletePod(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	return a.cs.CoreV1().Pods(ns).Delete(ctx, name, opts)
}
func (a clientsetAPI) PodLogs(ctx context.Context, ns, name string, opts *corev1.PodLogOptions) ([]byte, error) {
	return a.cs.CoreV1().Pods(ns).GetLogs(name, opts).DoRaw(ctx)
}
func (a clientsetAPI) Events(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.EventList, error) {
	return a.cs.CoreV1().Events(ns).List(ctx, opts)
}
func (a clientsetAPI) RuntimeClasses(ctx context.Context) (*nodev1.RuntimeClassList, error) {
	return a.cs.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
}
func (a clientsetAPI) Review(ctx context.Context, r *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
	return a.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, r, metav1.CreateOptions{})
}

// A pod's annotation names the node folder Remove undoes: one that is not
// beside the pod's own run folder is not trusted (anyone who may create a
// pod there writes its annotations).
func TestKubeForgedNodePlan(t *testing.T) {
	k, _, _ := newFakeKube(t)
	pod, err := k.podFor(kubeSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if planOf(pod).Dir == "" {
		t.Fatal("the bridge's own plan is not read back")
	}
	for _, dir := range []string{"/etc.node", "/var/lib/other/run-1.node", ""} {
		forged := pod.DeepCopy()
		forged.Annotations[kubeNodeAnnotation] = `{"dir":"` + dir + `","tmpfs":1}`
		if got := planOf(forged); got.Dir != "" {
			t.Errorf("forged dir %q trusted: %+v", dir, got)
		}
	}
	forged := pod.DeepCopy()
	forged.Spec.Volumes[0].VolumeSource.HostPath.Path = "/etc"
	if got := planOf(forged); got.Dir != "" {
		t.Errorf("a plan beside a forged relay folder trusted: %+v", got)
	}
}

// A node lists its 50 largest images only: the runner's absence from a
// full list is not proof it is missing.
func TestKubeImageInfoFullList(t *testing.T) {
	k, cs, _ := newFakeKube(t)
	node, _ := cs.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	for i := range kubeletListedImages {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("docker.io/library/big-%d:1", i)}})
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.ImageInfo(context.Background(), "bridge-runner:unlisted"); err != nil {
		t.Fatalf("an unlisted image on a full list: %v", err)
	}
}

// A mount's folder gone since the policy checked it fails the create with
// the policy's message, as on the other engines, before any pod or node
// mount is made.
func TestKubeCreateChecksMountHosts(t *testing.T) {
	k, cs, n := newFakeKube(t)
	spec := kubeSpec(t)
	if err := os.Remove(spec.DataMounts[0].Host); err != nil {
		t.Fatal(err)
	}
	_, err := k.Create(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "the host folder no longer exists") {
		t.Fatalf("create with the mount's folder gone: %v", err)
	}
	if pods, _ := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 || n.log() != "" {
		t.Errorf("made %d pods, node did %q", len(pods.Items), n.log())
	}
}
