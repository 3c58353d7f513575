package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// kubeAPI is what the Kubernetes engine asks of the API server: a few
// calls on pods, their logs and events, the node, RuntimeClasses and
// access reviews. It is its own, over client-go's REST client and a scheme
// of the three API groups it uses, rather than client-go's clientset:
// that one registers every group of the API in every bridge's process,
// which cost each bridge 21 MB of memory, Docker's and Podman's too.
type kubeAPI interface {
	ServerVersion(ctx context.Context) (string, error)
	Node(ctx context.Context, name string) (*corev1.Node, error)
	Namespace(ctx context.Context, name string) error
	CreatePod(ctx context.Context, ns string, p *corev1.Pod) (*corev1.Pod, error)
	Pod(ctx context.Context, ns, name string) (*corev1.Pod, error)
	Pods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error)
	DeletePod(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error
	PodLogs(ctx context.Context, ns, name string, opts *corev1.PodLogOptions) ([]byte, error)
	Events(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.EventList, error)
	RuntimeClasses(ctx context.Context) (*nodev1.RuntimeClassList, error)
	Review(ctx context.Context, r *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error)
}

// restAPI is kubeAPI over REST clients of the core, node.k8s.io and
// authorization.k8s.io groups.
type restAPI struct {
	core, node, authz rest.Interface
	params            runtime.ParameterCodec
}

// newRESTAPI makes the clients from cfg, whose transport and credentials
// they share.
func newRESTAPI(cfg *rest.Config) (*restAPI, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, nodev1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	// ListOptions, DeleteOptions and the rest, in each group's version.
	for _, gv := range []schema.GroupVersion{corev1.SchemeGroupVersion, nodev1.SchemeGroupVersion, authorizationv1.SchemeGroupVersion} {
		metav1.AddToGroupVersion(scheme, gv)
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	client := func(path string, gv schema.GroupVersion) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion, c.NegotiatedSerializer = path, &gv, codecs
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientFor(c)
	}
	a := &restAPI{params: runtime.NewParameterCodec(scheme)}
	var err error
	if a.core, err = client("/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.node, err = client("/apis", nodev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if a.authz, err = client("/apis", authorizationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *restAPI) ServerVersion(ctx context.Context) (string, error) {
	b, err := a.core.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var v version.Info
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("the API server's version: %w", err)
	}
	return v.GitVersion, nil
}

func (a *restAPI) Node(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	return &n, a.core.Get().Resource("nodes").Name(name).Do(ctx).Into(&n)
}

func (a *restAPI) Namespace(ctx context.Context, name string) error {
	return a.core.Get().Resource("namespaces").Name(name).Do(ctx).Error()
}

func (a *restAPI) CreatePod(ctx context.Context, ns string, p *corev1.Pod) (*corev1.Pod, error) {
	var out corev1.Pod
	return &out, a.core.Post().Namespace(ns).Resource("pods").Body(p).Do(ctx).Into(&out)
}

func (a *restAPI) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	return &p, a.core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(&p)
}

func (a *restAPI) Pods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	var l corev1.PodList
	return &l, a.core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, a.params).Do(ctx).Into(&l)
}

func (a *restAPI) WatchPods(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return a.core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, a.params).Watch(ctx)
}

func (a *restAPI) DeletePod(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
	return a.core.Delete().Namespace(ns).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

func (a *restAPI) PodLogs(ctx context.Context, ns, name string, opts *corev1.PodLogOptions) ([]byte, error) {
	return a.core.Get().Namespace(ns).Resource("pods").Name(name).SubResource("log").VersionedParams(opts, a.params).Do(ctx).Raw()
}

func (a *restAPI) Events(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.EventList, error) {
	var l corev1.EventList
	return &l, a.core.Get().Namespace(ns).Resource("events").VersionedParams(&opts, a.params).Do(ctx).Into(&l)
}

func (a *restAPI) RuntimeClasses(ctx context.Context) (*nodev1.RuntimeClassList, error) {
	var l nodev1.RuntimeClassList
	return &l, a.node.Get().Resource("runtimeclasses").Do(ctx).Into(&l)
}

func (a *restAPI) Review(ctx context.Context, r *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
	var out authorizationv1.SelfSubjectAccessReview
	return &out, a.authz.Post().Resource("selfsubjectaccessreviews").Body(r).Do(ctx).Into(&out)
}
