// Package kubernetes is the Kubernetes engine: a [sandbox.Runtime] that
// runs each container as a pod on the bridge's own node (kubernetes.go),
// over a small API client of its own (kubeapi.go: client-go's REST client
// with only the groups it needs), doing on the node what a pod spec cannot
// say (kubenode_linux.go: /tmp as a noexec tmpfs, data mounts cloned
// read-only before they are attached, the pids limit in the pod's cgroup).
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Environment variables the Kubernetes engine reads.
const (
	// EnvNamespace is the namespace of the run pods (DefaultNamespace).
	EnvNamespace = "BRIDGE_KUBE_NAMESPACE"
	// EnvNode is the node the run pods are pinned to: the bridge's own.
	// NODE_NAME (the DaemonSet's downward API) is read when it is unset,
	// then the host's name.
	EnvNode = "BRIDGE_KUBE_NODE"
	// EnvKubeletDir is the kubelet's root directory (/var/lib/kubelet),
	// where the bridge installs its seccomp profile for the pods.
	EnvKubeletDir = "BRIDGE_KUBELET_DIR"
	// EnvPodUID is the uid of the bridge's own pod (the DaemonSet's
	// downward API): its run pods carry it, and at start it removes the
	// run pods on its node that a bridge pod before it left.
	EnvPodUID = "BRIDGE_KUBE_POD_UID"
)

// LabelBridgePod is the uid of the bridge pod that made a run pod.
const LabelBridgePod = "io.github.bridge-mcp.bridge-pod"

// DefaultNamespace is where run pods go unless EnvNamespace says.
const DefaultNamespace = "bridge-runs"

// kubeLabelsAnnotation holds every label of a run pod as JSON: Kubernetes
// label values cannot hold all of the bridge's (LabelOwner has slashes).
const kubeLabelsAnnotation = "io.github.bridge-mcp/labels"

// kubeContainer is the name of the runner's container in its pod.
const kubeContainer = "runner"

// Client is the engine that runs each container as a pod, pinned to
// the node the bridge runs on: the run folder with the relay socket, /tmp
// and the data mounts reach the pod as hostPath volumes, so the socket is
// still the only way out. It needs the bridge on the node, as root there
// for what only the node can do: /tmp as a noexec tmpfs and the data
// mounts read-only, nosuid, nodev and noexec (kubenode_linux.go), and the pids
// limit in the pod's cgroup.
type Client struct {
	api    kubeAPI
	ns     string
	node   string
	podUID string // the bridge's own pod, when it runs in one
	ownNS  string // the namespace of the bridge's service account, in a pod
	source string // where the client's configuration came from
	host   string // the API server

	// node does what only the node can: mounts and cgroup limits.
	nodeOps nodeOps
	// seccomp is the Localhost profile's path under the kubelet's seccomp
	// directory, or "" for RuntimeDefault (seccompWhy says why).
	seccomp, seccompWhy string

	mu sync.Mutex
	// pending are the pods created by Create and not yet posted by Start.
	pending map[string]*corev1.Pod
	// started are the node plans of the pods Start posted, until Remove:
	// a pod deleted by someone else (its namespace going) still has its
	// node mounts to undo.
	started map[string]nodePlan
	// uids are the uids of the pods Start made, until Remove: a pod's name
	// passes to another pod once it is deleted (Confirm).
	uids map[string]types.UID
	// classes maps an OCI runtime's handler (runsc) to its RuntimeClass.
	classes map[string]string
}

var (
	_ sandbox.Runtime   = (*Client)(nil)
	_ sandbox.Confirmer = (*Client)(nil)
)

// nodeOps is what the Kubernetes engine does on its node, outside the API.
type nodeOps interface {
	// mountTmp mounts a tmpfs of size bytes at dir: noexec, nosuid,
	// nodev, mode 1777.
	mountTmp(dir string, size int64) error
	// bindReadOnly bind-mounts src at dir: read-only, nosuid, nodev and
	// noexec.
	bindReadOnly(src, dir string) error
	// unmount detaches whatever is mounted at dir (lazily: a pod that is
	// still going keeps it until it ends).
	unmount(dir string) error
	// setPids writes the pids limit of the container's cgroup, found by
	// the pod's uid and the container's id.
	setPids(podUID, containerID string, limit int64) error
	// canSetPids says whether setPids can work here, and if not why.
	canSetPids() (bool, string)
}

// serviceAccountNamespace is where a pod's service account's namespace is
// mounted (with its token).
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// kubeConfig says where the engine finds its cluster: "in-cluster" (the
// pod's service account), a kubeconfig file, or "" for client-go's loading
// rules ($KUBECONFIG, which may list several files, else ~/.kube/config).
func kubeConfig(kubeconfig string) (*rest.Config, string, error) {
	if kubeconfig == "in-cluster" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("%w: in-cluster configuration: %v", sandbox.ErrEngineUnreachable, err)
		}
		return cfg, "in-cluster service account", nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	why := "$KUBECONFIG or ~/.kube/config"
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
		why = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%w: no Kubernetes configuration (%s): %v: set KUBECONFIG, or run the bridge in a pod with a service account",
			sandbox.ErrEngineUnreachable, why, err)
	}
	return cfg, why, nil
}

// New connects to the cluster kubeconfig names (see kubeConfig)
// and checks that the node the pods go to is there.
func New(ctx context.Context, kubeconfig string) (*Client, error) {
	cfg, why, err := kubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "bridge"
	// A run makes a handful of requests; the client's default of 5 a
	// second would queue a burst of runs behind each other.
	cfg.QPS, cfg.Burst = 200, 400
	api, err := newRESTAPI(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrEngineUnreachable, err)
	}
	k := newClient(api, why, cfg.Host, linuxNode{})
	if kubeconfig == "in-cluster" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			k.ownNS = strings.TrimSpace(string(b))
		}
	}
	if err := k.check(ctx); err != nil {
		return nil, err
	}
	k.installSeccomp(os.Getenv(EnvKubeletDir))
	if err := k.reapBridgePods(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// reapBridgePods removes the run pods on this node that another bridge
// pod made: on a node, one bridge pod runs at a time (a DaemonSet's), so
// they are a dead one's. A bridge on the host (no pod uid) leaves them,
// and Reap finds its own dead processes' pods by their owner.
func (k *Client) reapBridgePods(ctx context.Context) error {
	if k.podUID == "" {
		return nil
	}
	sel := LabelBridgePod + "," + LabelBridgePod + "!=" + k.podUID
	pods, err := k.api.Pods(ctx, k.ns, metav1.ListOptions{LabelSelector: sel,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.node).String()})
	if err != nil {
		return k.wrap(err, "listing the run pods of earlier bridge pods")
	}
	for _, p := range pods.Items {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := k.Remove(rctx, p.Name)
		cancel()
		if err != nil {
			return fmt.Errorf("removing run pod %s of an earlier bridge pod: %w", p.Name, err)
		}
	}
	return nil
}

// newClient is the engine over an API client, for New and tests.
func newClient(api kubeAPI, source, host string, n nodeOps) *Client {
	ns := os.Getenv(EnvNamespace)
	if ns == "" {
		ns = DefaultNamespace
	}
	node := os.Getenv(EnvNode)
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		if h, err := os.Hostname(); err == nil {
			node = strings.ToLower(h)
		}
	}
	return &Client{api: api, ns: ns, node: node, podUID: os.Getenv(EnvPodUID), source: source, host: host, nodeOps: n,
		pending: map[string]*corev1.Pod{}, started: map[string]nodePlan{}, uids: map[string]types.UID{}, seccompWhy: "no kubelet directory to install the bridge's profile in"}
}

// check asks the API for the node and the namespace, so that a wrong
// configuration fails at start with what to fix.
func (k *Client) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := k.api.Node(ctx, k.node); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: the cluster at %s has no node %q: the bridge runs its pods on its own node; set %s (or NODE_NAME) to its name",
				sandbox.ErrEngineUnreachable, k.host, k.node, EnvNode)
		}
		return k.wrap(err, "reading node "+k.node)
	}
	if err := k.api.Namespace(ctx, k.ns); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: the cluster at %s has no namespace %q for the run pods: create it (deploy/kubernetes has it), or set %s",
				sandbox.ErrEngineUnreachable, k.host, k.ns, EnvNamespace)
		}
		if !apierrors.IsForbidden(err) { // the bridge need not read namespaces
			return k.wrap(err, "reading namespace "+k.ns)
		}
	}
	return nil
}

// installSeccomp writes the bridge's seccomp profile where the kubelet
// reads Localhost profiles; when it cannot, pods get RuntimeDefault.
func (k *Client) installSeccomp(kubeletDir string) {
	if kubeletDir == "" {
		kubeletDir = "/var/lib/kubelet"
	}
	if _, err := os.Stat(kubeletDir); err != nil {
		k.seccompWhy = fmt.Sprintf("no kubelet directory at %s (set %s)", kubeletDir, EnvKubeletDir)
		return
	}
	dir := filepath.Join(kubeletDir, "seccomp", "bridge-mcp")
	path, err := engines.SeccompProfileFile(dir)
	if err != nil {
		k.seccompWhy = fmt.Sprintf("cannot install the bridge's profile in %s: %v", dir, err)
		return
	}
	k.seccomp, k.seccompWhy = filepath.Join("bridge-mcp", filepath.Base(path)), ""
}

// Seccomp says which seccomp profile the pods run under, for doctor.
func (k *Client) Seccomp() string {
	if k.seccomp != "" {
		return "the bridge's own, as the Localhost profile " + k.seccomp
	}
	return "the container runtime's default (RuntimeDefault): " + k.seccompWhy
}

// Name is "kubernetes".
func (k *Client) Name() string { return sandbox.EngineKubernetes }

// Close releases nothing: the client's connections close with the process.
func (k *Client) Close() error { return nil }

// Node is the node the run pods go to; Namespace their namespace.
func (k *Client) Node() string      { return k.node }
func (k *Client) Namespace() string { return k.ns }

// Info describes the cluster and the node. Memory and CPU limits are the
// pod's resources; the pids limit is the bridge's to write in the pod's
// cgroup, which it can only as root on the node (Kubernetes itself bounds
// pids per node, with the kubelet's podPidsLimit).
func (k *Client) Info(ctx context.Context) (sandbox.EngineInfo, error) {
	v, err := k.api.ServerVersion(ctx)
	if err != nil {
		return sandbox.EngineInfo{}, k.wrap(err, "asking the API server's version")
	}
	node, err := k.api.Node(ctx, k.node)
	if err != nil {
		return sandbox.EngineInfo{}, k.wrap(err, "reading node "+k.node)
	}
	info := sandbox.EngineInfo{
		Name: sandbox.EngineKubernetes, Socket: k.host, Version: v, APIVersion: "v1",
		CgroupVersion: localCgroupVersion(), OCIRuntime: "runc",
	}
	if rv := node.Status.NodeInfo.ContainerRuntimeVersion; rv != "" {
		info.Version += " (node " + k.node + ": " + rv + ")"
	}
	pids, why := k.nodeOps.canSetPids()
	info.Enforce = sandbox.Enforcement{Memory: true, CPU: true, Pids: pids}
	if !pids {
		info.Enforce.Reason = "pids: " + why
	}
	// Runtime classes the pods may ask for, by handler (runsc).
	classes := map[string]string{}
	if rcs, err := k.api.RuntimeClasses(ctx); err == nil {
		info.OCIRuntimes = map[string]sandbox.OCIRuntimeInfo{"runc": {}}
		for _, rc := range rcs.Items {
			classes[rc.Handler] = rc.Name
			info.OCIRuntimes[rc.Handler] = sandbox.OCIRuntimeInfo{Args: []string{"runtimeClassName=" + rc.Name}}
		}
	}
	k.mu.Lock()
	k.classes = classes
	k.mu.Unlock()
	return info, nil
}

// ImageInfo reports whether the node holds ref, from the images the
// kubelet lists in the node's status (pods here never pull).
func (k *Client) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	node, err := k.api.Node(ctx, k.node)
	if err != nil {
		return sandbox.ImageInfo{}, k.wrap(err, "reading node "+k.node)
	}
	want := normalizeImageRef(ref)
	for _, img := range node.Status.Images {
		for _, n := range img.Names {
			if normalizeImageRef(n) == want {
				return sandbox.ImageInfo{ID: img.Names[0], Size: img.SizeBytes}, nil
			}
		}
	}
	if len(node.Status.Images) >= kubeletListedImages {
		// The kubelet lists the largest 50 images only: the runner may be
		// there unlisted. A pod that cannot find it fails its run with
		// ErrImageNotFound (ErrImageNeverPull).
		return sandbox.ImageInfo{}, nil
	}
	return sandbox.ImageInfo{}, fmt.Errorf("%w: node %s holds no image %s (run pods never pull one)", sandbox.ErrImageNotFound, k.node, ref)
}

// kubeletListedImages is how many images a kubelet lists in its node's
// status by default (nodeStatusMaxImages), the largest first.
const kubeletListedImages = 50

// normalizeImageRef is ref as containerd names it: docker.io/library/ for
// a bare name, :latest for no tag.
func normalizeImageRef(ref string) string {
	name, digest, _ := strings.Cut(ref, "@")
	first, _, ok := strings.Cut(name, "/")
	if !ok || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if !ok {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	if i := strings.LastIndex(name, ":"); i < strings.LastIndex(name, "/") || i < 0 {
		if digest == "" {
			name += ":latest"
		}
	}
	if digest != "" {
		name += "@" + digest
	}
	return name
}

// BuildImage is refused: a cluster builds no images. Build with Docker or
// Podman and import the image into the node's runtime.
func (k *Client) BuildImage(ctx context.Context, opts sandbox.BuildOptions) error {
	return fmt.Errorf("the kubernetes engine builds no images: build %s with `bridge image build --runtime docker` (or podman) on the node, "+
		"then import it into the node's container runtime (`docker save %s | ctr -n k8s.io images import -`)", opts.Tag, opts.Tag)
}

// kubeLabelValue matches what a Kubernetes label value may be.
var kubeLabelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

// Create builds the pod for spec; Start posts it (a pod runs as soon as it
// exists). It refuses what a pod cannot hold as the spec asks.
func (k *Client) Create(ctx context.Context, spec sandbox.ContainerSpec) (string, error) {
	// As the other engines do: a mount's folder gone or replaced since the
	// policy checked it is the policy's error, not the node's.
	if err := sandbox.CheckDataMountHosts(spec.DataMounts); err != nil {
		return "", fmt.Errorf("create pod for %s: %w", spec.Name, err)
	}
	pod, err := k.podFor(spec)
	if err != nil {
		return "", err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, dup := k.pending[pod.Name]; dup {
		return "", fmt.Errorf("create pod %s: already created", pod.Name)
	}
	k.pending[pod.Name] = pod
	return pod.Name, nil
}

// nodeDir is the folder beside a run folder that holds the pod's node
// mounts (its /tmp and its data mounts).
func nodeDir(runDir string) string { return runDir + ".node" }

// kubeRunFolder is what a run folder's name is (run-PID.START-RANDOM, or
// run-RANDOM: os.MkdirTemp's): a run pod is named after it.
var kubeRunFolder = regexp.MustCompile(`^run-[0-9.]*-?[0-9]+$`)

// kubePodPrefix starts every run pod's name: "bridge-" and its run
// folder's name.
const kubePodPrefix = "bridge-"

// podName is the name of the pod whose run folder is runDir: "bridge-"
// and the folder's name with its dots as dashes (a pod's name is its
// host name: a DNS label). A pod's name is unique in its namespace while
// the pod exists, so naming the pod after its folder, and admitting
// (deploy/kubernetes/admission.yaml) only hostPaths of folders whose name
// is the pod's, makes the folders one pod's: a second pod that asks for
// them is refused by the API server, whoever asks.
func podName(runDir string) (string, error) {
	base := filepath.Base(runDir)
	name := kubePodPrefix + strings.ReplaceAll(base, ".", "-")
	if !kubeRunFolder.MatchString(base) || len(name) > 63 {
		return "", fmt.Errorf("create pod: the run folder %s cannot name a pod (run-DIGITS, at most %d characters)", runDir, 63-len(kubePodPrefix))
	}
	return name, nil
}

// podFor translates spec into a pod pinned to this node, named after its
// run folder (podName).
func (k *Client) podFor(spec sandbox.ContainerSpec) (*corev1.Pod, error) {
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	if !spec.NetworkNone || !spec.ReadOnlyRoot || !spec.CapDropAll || !spec.NoNewPrivileges {
		return nil, errors.New("create pod: the kubernetes engine runs only hardened specs (no network, read-only root, no capabilities, no new privileges)")
	}
	var relay *sandbox.Mount
	for i := range spec.Mounts {
		if spec.Mounts[i].Target == sandbox.RelayDir {
			relay = &spec.Mounts[i]
		} else {
			return nil, fmt.Errorf("create pod: no bind mount but the run folder is supported, got %s", spec.Mounts[i].Target)
		}
	}
	if relay == nil {
		return nil, errors.New("create pod: the spec has no run folder")
	}
	name, err := podName(relay.Source)
	if err != nil {
		return nil, err
	}
	labels, annotations := k.podLabels(spec)

	var class *string
	if spec.OCIRuntime != "" && spec.OCIRuntime != "runc" {
		k.mu.Lock()
		name, ok := k.classes[spec.OCIRuntime]
		k.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: the cluster has no RuntimeClass with handler %s: create one (deploy/kubernetes/runtimeclass-gvisor.yaml) on a node whose containerd has it",
				sandbox.ErrOCIRuntime, spec.OCIRuntime)
		}
		class = &name
	}
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if k.seccomp != "" {
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptrTo(k.seccomp)}
	}

	res := corev1.ResourceList{}
	if spec.Memory > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(spec.Memory, resource.BinarySI)
	}
	if spec.CPUQuota > 0 && spec.CPUPeriod > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(1, spec.CPUQuota*1000/spec.CPUPeriod), resource.DecimalSI)
	}

	env := podEnv(spec)

	nd := nodeDir(relay.Source)
	volumes, mounts, err := podVolumes(spec, relay.Source, nd)
	if err != nil {
		return nil, err
	}
	// The node mounts Start makes, in the annotation so that Remove (or
	// a later bridge's reaping) knows what to undo.
	plan, _ := json.Marshal(nodePlan{Dir: nd, Tmpfs: tmpfsSize(spec.Tmpfs), Data: spec.DataMounts, Pids: spec.Pids})
	annotations[kubeNodeAnnotation] = string(plan)

	no, yes := false, true
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      k.node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			ShareProcessNamespace:         &spec.Init, // the pause process reaps orphans, as an init does
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSDefault,
			RuntimeClassName:              class,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &yes, SeccompProfile: seccomp,
			},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: kubeContainer, Image: spec.Image, ImagePullPolicy: corev1.PullNever,
				Command: spec.Command, Env: env, WorkingDir: spec.WorkDir,
				Resources: corev1.ResourceRequirements{Limits: res, Requests: res},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &yes,
					ReadOnlyRootFilesystem: &yes, AllowPrivilegeEscalation: &no, Privileged: &no,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: seccomp,
				},
				VolumeMounts:             mounts,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: volumes,
		},
	}
	return pod, nil
}

// podLabels are a run pod's labels (the spec's that fit in one, and the
// bridge's pod) and annotations (all the spec's labels).
func (k *Client) podLabels(spec sandbox.ContainerSpec) (labels, annotations map[string]string) {
	labels, annotations = map[string]string{}, map[string]string{}
	for key, v := range spec.Labels {
		if kubeLabelValue.MatchString(v) && len(v) <= 63 {
			labels[key] = v
		}
	}
	if k.podUID != "" {
		labels[LabelBridgePod] = k.podUID
	}
	all, _ := json.Marshal(spec.Labels)
	annotations[kubeLabelsAnnotation] = string(all)
	return labels, annotations
}

// podEnv is the runner container's environment: the spec's, and what
// the runner does in the pod's place.
func podEnv(spec sandbox.ContainerSpec) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(spec.Env))
	for n, v := range spec.Env {
		env = append(env, corev1.EnvVar{Name: n, Value: v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	// The rlimits a pod cannot set: the runner lowers its own before it
	// takes any code (BRIDGE_RLIMITS).
	if len(spec.Rlimits) > 0 {
		var rl []string
		for _, r := range spec.Rlimits {
			rl = append(rl, fmt.Sprintf("%s=%d:%d", r.Name, r.Soft, r.Hard))
		}
		env = append(env, corev1.EnvVar{Name: EnvRlimits, Value: strings.Join(rl, ",")})
	}

	// A pod always has a network interface (the CNI's): the runner then
	// refuses the code every IP and packet socket (BRIDGE_NO_INET).
	env = append(env, corev1.EnvVar{Name: EnvNoInet, Value: "1"})
	// The kubelet gives every container the API server's address
	// (KUBERNETES_SERVICE_HOST, ...), service links or not: not the code's.
	env = append(env, corev1.EnvVar{Name: EnvDrop, Value: "KUBERNETES_"})
	return env
}

// podVolumes are a run pod's hostPath volumes and its container's mounts
// of them: the run folder runDir read-only, and the /tmp and data mounts
// the bridge makes in the node folder nd.
func podVolumes(spec sandbox.ContainerSpec, runDir, nd string) ([]corev1.Volume, []corev1.VolumeMount, error) {
	dir := corev1.HostPathDirectory
	volumes := []corev1.Volume{
		{Name: "relay", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: runDir, Type: &dir}}},
	}
	mounts := []corev1.VolumeMount{{Name: "relay", MountPath: sandbox.RelayDir, ReadOnly: true}}
	if len(spec.Tmpfs) > 1 {
		return nil, nil, errors.New("create pod: one tmpfs at most")
	}
	for target := range spec.Tmpfs {
		volumes = append(volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(nd, "tmp"), Type: &dir}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "tmp", MountPath: target})
	}
	for i, m := range spec.DataMounts {
		name := fmt.Sprintf("data-%d", i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(nd, name), Type: &dir}}})
		// Not readOnly here: the node's mount is read-only, nosuid, nodev
		// and noexec already, and a plain bind keeps all four, where the
		// runtime's read-only remount of it would set read-only alone and
		// drop the other three (runc does).
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Path})
	}
	return volumes, mounts, nil
}

// EnvRlimits carries the rlimits a pod cannot set to the runner, which
// lowers its own to them before it takes any code: "nofile=1024:1024,...".
const EnvRlimits = "BRIDGE_RLIMITS"

// EnvDrop lists prefixes of variables the runner removes before the code
// runs: those an engine puts in every container.
const EnvDrop = "BRIDGE_ENV_DROP"

// EnvNoInet ("1") tells the runner to refuse the code IP and packet
// sockets, for an engine that cannot give a container no network.
const EnvNoInet = "BRIDGE_NO_INET"

// kubeNodeAnnotation is the JSON of a pod's nodePlan.
const kubeNodeAnnotation = "io.github.bridge-mcp/node"

// nodePlan is what the bridge does on the node for one pod.
type nodePlan struct {
	Dir   string              `json:"dir"`
	Tmpfs int64               `json:"tmpfs,omitempty"`
	Data  []sandbox.DataMount `json:"data,omitempty"`
	Pids  int64               `json:"pids,omitempty"`
}

// tmpfsSize is the size= of the spec's tmpfs options (0 when none).
func tmpfsSize(t map[string]string) int64 {
	for _, opts := range t {
		for _, o := range strings.Split(opts, ",") {
			if v, ok := strings.CutPrefix(o, "size="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// parseUser reads "uid:gid".
func parseUser(u string) (int64, int64, error) {
	a, b, ok := strings.Cut(u, ":")
	uid, err1 := strconv.ParseInt(a, 10, 64)
	gid, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || uid == 0 {
		return 0, 0, fmt.Errorf("create pod: user %q is not a non-root uid:gid", u)
	}
	return uid, gid, nil
}

func ptrTo[T any](v T) *T { return &v }

// prepare makes the pod's node mounts.
func (k *Client) prepare(plan nodePlan) (err error) {
	if err := os.Mkdir(plan.Dir, 0o711); err != nil && !os.IsExist(err) {
		return fmt.Errorf("making the pod's node folder: %w", err)
	}
	defer func() {
		if err != nil {
			k.undo(plan)
		}
	}()
	if plan.Tmpfs > 0 {
		tmp := filepath.Join(plan.Dir, "tmp")
		if err := os.Mkdir(tmp, 0o700); err != nil && !os.IsExist(err) {
			return err
		}
		if err := k.nodeOps.mountTmp(tmp, plan.Tmpfs); err != nil {
			return fmt.Errorf("mounting the pod's /tmp as a noexec tmpfs on node %s: %w (the kubernetes engine needs the bridge to run as root on the node: "+
				"as a host service, or the privileged DaemonSet of deploy/kubernetes)", k.node, err)
		}
	}
	for i, m := range plan.Data {
		d := filepath.Join(plan.Dir, fmt.Sprintf("data-%d", i))
		if err := os.Mkdir(d, 0o700); err != nil && !os.IsExist(err) {
			return err
		}
		if err := k.nodeOps.bindReadOnly(m.Host, d); err != nil {
			return fmt.Errorf("the policy's mount %s → %s: %w", m.Host, m.Path, err)
		}
	}
	return nil
}

// undo removes the pod's node mounts and folder; what cannot be removed
// is an error.
func (k *Client) undo(plan nodePlan) error {
	if plan.Dir == "" || !strings.HasSuffix(plan.Dir, ".node") {
		return nil
	}
	var errs []error
	entries, _ := os.ReadDir(plan.Dir)
	for _, e := range entries {
		p := filepath.Join(plan.Dir, e.Name())
		if err := k.nodeOps.unmount(p); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(plan.Dir); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Start makes the pod's node mounts, posts the pod and waits until its
// runner is running, then sets its pids limit. A pod that cannot start
// (its image missing, no room on the node) fails with the reason the
// cluster gives.
func (k *Client) Start(ctx context.Context, id string) error {
	k.mu.Lock()
	pod, ok := k.pending[id]
	delete(k.pending, id)
	k.mu.Unlock()
	if !ok {
		return fmt.Errorf("start pod %s: %w", id, sandbox.ErrNotFound)
	}
	plan := planOf(pod)
	if err := k.prepare(plan); err != nil {
		return err
	}
	k.mu.Lock()
	k.started[id] = plan
	k.mu.Unlock()
	// A node that has no room for the pod (its CPU or memory taken by
	// other runs' pods, which ask requests = limits) makes the kubelet
	// reject it: it is made again once there may be room, until ctx ends
	// or the caller takes a container it holds instead (sandbox.NoRoom).
	// noRoom is the node's latest rejection: the start timeout says it
	// wherever it ends, also while a new try is made or watched.
	var created *corev1.Pod
	var cid, noRoom string
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		var err error
		created, err = k.api.CreatePod(ctx, k.ns, pod)
		if err != nil {
			k.undo(plan)
			if ctx.Err() != nil {
				return k.startTimedOut(id, noRoom, fmt.Errorf("pod %s did not start in time: %w", id, err))
			}
			return k.wrap(err, "creating pod "+id)
		}
		rejected := ""
		err = k.watchPod(ctx, id, created.ResourceVersion, func(p *corev1.Pod) (bool, error) {
			st := runnerStatus(p)
			switch {
			case p.UID != created.UID:
				// Deleted and made anew by someone else (a watch that
				// resumed by name would see the new one).
				return false, fmt.Errorf("pod %s was replaced by another of the same name before it started", id)
			case st != nil && st.State.Running != nil:
				cid = st.ContainerID
				return true, nil
			case st != nil && st.State.Terminated != nil:
				return true, nil // Wait tells how it ended
			case st != nil && st.State.Waiting != nil:
				return false, k.waitingError(p, st.State.Waiting)
			case p.Status.Phase == corev1.PodFailed && strings.HasPrefix(p.Status.Reason, "OutOf"):
				rejected = p.Status.Reason + ": " + p.Status.Message
				return true, nil
			case p.Status.Phase == corev1.PodFailed:
				return false, fmt.Errorf("pod %s failed before it started: %s %s", id, p.Status.Reason, p.Status.Message)
			}
			return false, nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return k.startTimedOut(id, noRoom, fmt.Errorf("pod %s did not start in time%s", id, k.eventsOf(id)))
			}
			return err
		}
		if rejected == "" {
			break
		}
		noRoom = rejected
		// The rejected pod never ran: it goes at once, and is made anew.
		err = k.api.DeletePod(ctx, k.ns, id, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0)),
			Preconditions: &metav1.Preconditions{UID: &created.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			if ctx.Err() != nil {
				return k.startTimedOut(id, noRoom, nil)
			}
			return k.wrapPod(err, "deleting the rejected", id)
		}
		if err := k.watchPod(ctx, id, "", func(*corev1.Pod) (bool, error) { return false, nil }); !errors.Is(err, sandbox.ErrNotFound) {
			if ctx.Err() == nil {
				return fmt.Errorf("pod %s: node %s had no room for it (%s), and removing it to try again failed: %w", id, k.node, noRoom, err)
			}
			return k.startTimedOut(id, noRoom, nil)
		}
		// The caller may hold room itself (the warm pool's ready pods):
		// it takes one of those instead of waiting.
		if sandbox.NoRoom(ctx, noRoom) {
			return fmt.Errorf("pod %s: node %s had no room for it (%s): %w", id, k.node, noRoom, sandbox.ErrNoRoom)
		}
		select {
		case <-ctx.Done():
			return k.startTimedOut(id, noRoom, nil)
		case <-time.After(backoff):
		}
	}
	return k.runnerRunning(id, created.UID, cid, plan)
}

// startTimedOut is Start's error when its ctx ended: that the node had no
// room for the pod when it rejected it (noRoom, its latest reason) within
// the start timeout, else err.
func (k *Client) startTimedOut(id, noRoom string, err error) error {
	if noRoom == "" {
		return err
	}
	return fmt.Errorf("pod %s: node %s had no room for it within the start timeout: %s", id, k.node, noRoom)
}

// runnerRunning finishes Start once the pod's runner container cid runs (or,
// with cid "", has ended): it keeps the pod's uid for Confirm, sets the
// pids limit and detaches the node's mounts.
func (k *Client) runnerRunning(id string, uid types.UID, cid string, plan nodePlan) error {
	k.mu.Lock()
	k.uids[id] = uid
	k.mu.Unlock()
	if cid == "" {
		return nil
	}
	if plan.Pids > 0 {
		if ok, _ := k.nodeOps.canSetPids(); ok {
			_, c, _ := strings.Cut(cid, "://")
			if err := k.nodeOps.setPids(string(uid), c, plan.Pids); err != nil {
				return fmt.Errorf("setting the pids limit of pod %s: %w", id, err)
			}
		}
	}
	// The runner's container holds its own mounts of /tmp and the data
	// folders now (private binds, made when it was created): the node's
	// go, before any code runs. What the code writes in /tmp is then out
	// of reach of every other pod, even one that takes this pod's name
	// (and so its folders) once this one is deleted.
	if err := k.undo(plan); err != nil {
		return fmt.Errorf("pod %s: detaching its /tmp and data mounts from node %s once its container held them: %w", id, k.node, err)
	}
	return nil
}

// planOf reads a pod's nodePlan from its annotation. Annotations are
// anyone's to write who may create a pod there: a plan whose folder is not
// the node folder of the pod's own run folder (a hostPath the admission
// policy holds to the bridge's run folders) is no plan.
func planOf(p *corev1.Pod) nodePlan {
	var plan nodePlan
	if json.Unmarshal([]byte(p.Annotations[kubeNodeAnnotation]), &plan) != nil {
		return nodePlan{}
	}
	for _, v := range p.Spec.Volumes {
		if v.Name == "relay" && v.HostPath != nil && filepath.IsAbs(v.HostPath.Path) &&
			filepath.Clean(v.HostPath.Path) == v.HostPath.Path && plan.Dir == nodeDir(v.HostPath.Path) &&
			strings.HasPrefix(filepath.Base(v.HostPath.Path), "run-") {
			return plan
		}
	}
	return nodePlan{}
}

// runnerStatus is the status of the runner's container, nil before the
// kubelet reports it.
func runnerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == kubeContainer {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// waitingError is nil while a waiting container may still start, and says
// why when it cannot.
func (k *Client) waitingError(p *corev1.Pod, w *corev1.ContainerStateWaiting) error {
	switch w.Reason {
	case "", "ContainerCreating", "PodInitializing":
		return nil
	case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
		return fmt.Errorf("%w: pod %s: %s: %s", sandbox.ErrImageNotFound, p.Name, w.Reason, w.Message)
	}
	return fmt.Errorf("pod %s cannot start: %s: %s%s", p.Name, w.Reason, w.Message, k.eventsOf(p.Name))
}

// eventsOf summarises the pod's warning events (": events: ..."), or "".
func (k *Client) eventsOf(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	evs, err := k.api.Events(ctx, k.ns, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	var out []string
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning || len(out) == 0 {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	if len(out) > 4 {
		out = out[len(out)-4:]
	}
	return ": events: " + strings.Join(out, "; ")
}

// watchPod calls fn with the pod as it is at rv and at each change after,
// until fn says done or fails, or ctx ends. A pod that is deleted fails
// with ErrNotFound.
func (k *Client) watchPod(ctx context.Context, name, rv string, fn func(*corev1.Pod) (bool, error)) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		if rv == "" {
			p, err := k.api.Pod(ctx, k.ns, name)
			if err != nil {
				return k.wrapPod(err, "reading", name)
			}
			if done, err := fn(p); done || err != nil {
				return err
			}
			rv = p.ResourceVersion
		}
		w, err := k.api.WatchPods(ctx, k.ns, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return k.wrapPod(err, "watching", name)
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return true, ctx.Err()
				case ev, open := <-w.ResultChan():
					if !open {
						return false, nil
					}
					switch ev.Type {
					case watch.Deleted:
						return true, fmt.Errorf("pod %s: %w", name, sandbox.ErrNotFound)
					case watch.Error:
						rv = "" // expired: read it afresh
						return false, nil
					case watch.Added, watch.Modified:
						p, ok := ev.Object.(*corev1.Pod)
						if !ok {
							continue
						}
						rv = p.ResourceVersion
						if done, err := fn(p); done || err != nil {
							return true, err
						}
					case watch.Bookmark:
						if p, ok := ev.Object.(*corev1.Pod); ok {
							rv = p.ResourceVersion
						}
					}
				}
			}
		}()
		if done {
			return err
		}
	}
}

// Wait blocks until the runner's container has ended, or the pod is gone.
func (k *Client) Wait(ctx context.Context, id string) (sandbox.ExitState, error) {
	var st sandbox.ExitState
	err := k.watchPod(ctx, id, "", func(p *corev1.Pod) (bool, error) {
		if s := runnerStatus(p); s != nil && s.State.Terminated != nil {
			st.ExitCode = int(s.State.Terminated.ExitCode)
			st.OOMKilled = s.State.Terminated.Reason == "OOMKilled"
			return true, nil
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			st.ExitCode = 137
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, sandbox.ErrNotFound) {
		// Deleted (killed): it is gone, as a killed container is.
		return sandbox.ExitState{ExitCode: 137}, nil
	}
	return st, err
}

// Kill deletes the pod, which the kubelet stops within its one second of
// grace. A pod that is gone is not an error.
func (k *Client) Kill(ctx context.Context, id string) error {
	err := k.api.DeletePod(ctx, k.ns, id, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(1))})
	if err != nil && !apierrors.IsNotFound(err) {
		return k.wrapPod(err, "deleting", id)
	}
	return nil
}

// Remove deletes the pod, waits until the kubelet has stopped it and the
// API has let it go, and undoes its node mounts. A pod that is gone is
// not an error.
func (k *Client) Remove(ctx context.Context, id string) error {
	k.mu.Lock()
	pending, wasPending := k.pending[id]
	delete(k.pending, id)
	mine, started := k.started[id]
	k.mu.Unlock()
	if wasPending {
		return k.undo(planOf(pending))
	}
	p, err := k.api.Pod(ctx, k.ns, id)
	if apierrors.IsNotFound(err) {
		if started {
			if err := k.undo(mine); err != nil {
				return err
			}
		}
		k.forget(id)
		return nil
	}
	if err != nil {
		// The API does not answer (or no longer lets this bridge in): the
		// node's mounts go anyway. A pod still running keeps its own view
		// of them until it ends; the pod itself is retried.
		if started {
			k.undo(mine)
		}
		return k.wrapPod(err, "reading", id)
	}
	plan := planOf(p)
	err = k.api.DeletePod(ctx, k.ns, id, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(1)),
		Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return k.wrapPod(err, "deleting", id)
	}
	err = k.watchPod(ctx, id, "", func(*corev1.Pod) (bool, error) { return false, nil })
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	if err := k.undo(plan); err != nil {
		return err
	}
	k.forget(id)
	return nil
}

// forget drops what the engine kept of a pod it removed.
func (k *Client) forget(id string) {
	k.mu.Lock()
	delete(k.started, id)
	delete(k.uids, id)
	k.mu.Unlock()
}

// Confirm says whether the pod named id is still the one Start made, for
// a runner that has just connected from it. Anyone who may create pods
// there can read the relay token in the pod's spec; the run folder with
// the socket is admitted only to the pod of its name, which this pod
// holds while it exists. A pod that connects after this one was deleted
// and another took its name is that other pod: its uid differs.
func (k *Client) Confirm(ctx context.Context, id string) error {
	k.mu.Lock()
	uid, ok := k.uids[id]
	k.mu.Unlock()
	if !ok {
		return fmt.Errorf("pod %s: %w", id, sandbox.ErrNotFound)
	}
	p, err := k.api.Pod(ctx, k.ns, id)
	if err != nil {
		return k.wrapPod(err, "reading", id)
	}
	if p.UID != uid || p.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s: the runner connected from a pod of that name that the bridge did not start (it was deleted, or another took its name)", id)
	}
	return nil
}

// Logs returns the tail of the runner container's output.
func (k *Client) Logs(ctx context.Context, id string, limit int) (string, error) {
	tail := int64(200)
	b, err := k.api.PodLogs(ctx, k.ns, id, &corev1.PodLogOptions{Container: kubeContainer, TailLines: &tail})
	if err != nil {
		return "", k.wrapPod(err, "reading the logs of", id)
	}
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	return string(b), nil
}

// List returns the run pods that carry all the given labels.
func (k *Client) List(ctx context.Context, want map[string]string) ([]sandbox.ContainerInfo, error) {
	sel := labels.Set{}
	for key, v := range want {
		if kubeLabelValue.MatchString(v) && len(v) <= 63 {
			sel[key] = v
		}
	}
	pods, err := k.api.Pods(ctx, k.ns, metav1.ListOptions{LabelSelector: sel.AsSelector().String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.node).String()})
	if err != nil {
		return nil, k.wrap(err, "listing pods")
	}
	out := make([]sandbox.ContainerInfo, 0, len(pods.Items))
	for _, p := range pods.Items {
		l := map[string]string{}
		if err := json.Unmarshal([]byte(p.Annotations[kubeLabelsAnnotation]), &l); err != nil {
			l = p.Labels
		}
		out = append(out, sandbox.ContainerInfo{ID: p.Name, Labels: l})
	}
	return engines.MatchLabels(out, want), nil
}

// wrap turns a client error into one a user can act on.
func (k *Client) wrap(err error, doing string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: %w: the bridge's identity (%s) lacks a permission it needs: apply deploy/kubernetes/rbac.yaml, or see `bridge doctor --runtime kubernetes`",
			doing, err, k.source)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: %s: %v: the credentials of %s were refused", sandbox.ErrEngineUnreachable, doing, err, k.source)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w", doing, err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return fmt.Errorf("%s: %w", doing, err)
	}
	return fmt.Errorf("%w: %s: the API server at %s (%s): %v", sandbox.ErrEngineUnreachable, doing, k.host, k.source, err)
}

// wrapPod is wrap for one pod; a pod that is gone wraps ErrNotFound.
func (k *Client) wrapPod(err error, doing, id string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s pod %s: %w", doing, id, sandbox.ErrNotFound)
	}
	return k.wrap(err, doing+" pod "+id)
}

// Permission is one thing the bridge asks the API server to do.
type Permission struct {
	Verb, Resource, Subresource string
	// Group is the resource's API group ("" for the core group).
	Group string
	// Cluster is true for a resource outside the run namespace (nodes), or
	// for a namespaced one in every namespace.
	Cluster bool
	// Namespace, when set, is the namespace asked about instead of the
	// run namespace.
	Namespace string
	// Optional permissions only add to what the bridge can tell.
	Optional bool
	// Why says what a permission beyond the bridge's needs would let a
	// stolen token do.
	Why string
}

// Permissions are what the engine needs: its pods' life, their logs
// and events in the run namespace; the node it runs on; RuntimeClasses
// (optional: for gVisor).
func Permissions() []Permission {
	return []Permission{
		{Verb: "create", Resource: "pods"}, {Verb: "get", Resource: "pods"}, {Verb: "list", Resource: "pods"},
		{Verb: "watch", Resource: "pods"}, {Verb: "delete", Resource: "pods"},
		{Verb: "get", Resource: "pods", Subresource: "log"},
		{Verb: "list", Resource: "events"},
		{Verb: "get", Resource: "nodes", Cluster: true},
		{Verb: "list", Resource: "runtimeclasses", Group: "node.k8s.io", Cluster: true, Optional: true},
	}
}

// DangerousPermissions are permissions the bridge never uses that
// would let whoever holds its identity into the runs, the node or the
// cluster: `bridge doctor` warns of each the identity holds.
func DangerousPermissions() []Permission {
	const enter = "a way into every live run pod"
	return []Permission{
		{Verb: "create", Resource: "pods", Subresource: "exec", Why: enter},
		{Verb: "get", Resource: "pods", Subresource: "exec", Why: enter},
		{Verb: "create", Resource: "pods", Subresource: "attach", Why: enter},
		{Verb: "create", Resource: "pods", Subresource: "portforward", Why: enter},
		{Verb: "update", Resource: "pods", Subresource: "ephemeralcontainers", Why: "a container of any image added to a live run pod"},
		{Verb: "patch", Resource: "pods", Subresource: "ephemeralcontainers", Why: "a container of any image added to a live run pod"},
		{Verb: "update", Resource: "pods", Why: "a live run pod's image replaced"},
		{Verb: "patch", Resource: "pods", Why: "a live run pod's image replaced"},
		{Verb: "get", Resource: "secrets", Why: "the namespace's credentials"},
		{Verb: "list", Resource: "secrets", Why: "the namespace's credentials"},
		{Verb: "create", Resource: "pods", Cluster: true, Why: "pods in namespaces the admission policy does not hold"},
		{Verb: "get", Resource: "secrets", Cluster: true, Why: "every namespace's credentials"},
		{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Cluster: true, Why: "tokens of other identities"},
		{Verb: "get", Resource: "nodes", Subresource: "proxy", Cluster: true, Why: "the kubelet's API: every pod on the node"},
		{Verb: "create", Resource: "nodes", Subresource: "proxy", Cluster: true, Why: "the kubelet's API: every pod on the node"},
		{Verb: "impersonate", Resource: "users", Cluster: true, Why: "acting as anyone"},
		{Verb: "impersonate", Resource: "serviceaccounts", Cluster: true, Why: "acting as any service account"},
		{Verb: "create", Resource: "rolebindings", Group: "rbac.authorization.k8s.io", Why: "granting itself more"},
		{Verb: "create", Resource: "clusterrolebindings", Group: "rbac.authorization.k8s.io", Cluster: true, Why: "granting itself more"},
		{Verb: "delete", Resource: "validatingadmissionpolicybindings", Group: "admissionregistration.k8s.io", Cluster: true, Why: "the admission policy turned off"},
		{Verb: "update", Resource: "validatingadmissionpolicies", Group: "admissionregistration.k8s.io", Cluster: true, Why: "the admission policy rewritten"},
	}
}

// Missing asks the API server which of Permissions the bridge's
// identity lacks (SelfSubjectAccessReview).
func (k *Client) Missing(ctx context.Context) ([]Permission, error) {
	return k.review(ctx, Permissions(), false)
}

// Extra asks the API server which of DangerousPermissions the bridge's
// identity holds, though it needs none of them; in a pod, creating pods in
// its own namespace too (the admission policy holds only the run
// namespace's).
func (k *Client) Extra(ctx context.Context) ([]Permission, error) {
	perms := DangerousPermissions()
	if k.ownNS != "" && k.ownNS != k.ns {
		perms = append(perms, Permission{Verb: "create", Resource: "pods", Namespace: k.ownNS,
			Why: "pods beside the bridge, where the admission policy does not look"})
	}
	return k.review(ctx, perms, true)
}

// review returns those of perms whose SelfSubjectAccessReview says
// allowed (or, with allowed false, not allowed).
func (k *Client) review(ctx context.Context, perms []Permission, allowed bool) ([]Permission, error) {
	var out []Permission
	for _, p := range perms {
		attr := &authorizationv1.ResourceAttributes{Verb: p.Verb, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource}
		switch {
		case p.Namespace != "":
			attr.Namespace = p.Namespace
		case !p.Cluster:
			attr.Namespace = k.ns
		}
		r, err := k.api.Review(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attr}})
		if err != nil {
			return nil, k.wrap(err, "asking what the bridge may do")
		}
		if r.Status.Allowed == allowed {
			out = append(out, p)
		}
	}
	return out, nil
}

func (p Permission) String() string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	switch {
	case p.Namespace != "":
		r += " in namespace " + p.Namespace
	case p.Cluster && !clusterScoped(p.Resource):
		r += " in every namespace"
	}
	return p.Verb + " " + r
}

// clusterScoped says whether a resource Permission names belongs to
// no namespace.
func clusterScoped(resource string) bool {
	switch resource {
	case "nodes", "runtimeclasses", "users", "clusterrolebindings", "validatingadmissionpolicies", "validatingadmissionpolicybindings":
		return true
	}
	return false
}
