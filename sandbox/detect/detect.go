// Package detect finds the container engine that answers and opens it: the
// one package that knows every engine (sandbox/docker, sandbox/podman,
// sandbox/kubernetes, sandbox/runsc). "auto" tries $CONTAINER_HOST,
// rootless then rootful Podman, then $DOCKER_HOST or Docker's socket; a
// Kubernetes cluster, or gVisor driven by the bridge (runsc, runsc.go), is
// used only when asked for. A socket that refuses this user is explained
// by its owner and mode ([sandbox.AccessError]) rather than as an engine
// that does not run.
package detect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/rs/zerolog"
)

// Candidate is one place Open may find an engine: a socket, or a
// Kubernetes configuration.
type Candidate struct {
	Engine string // EnginePodman, EngineDocker, EngineKubernetes or EngineRunsc
	URI    string // unix:///path
	// Why says where the URI came from, for logs and doctor.
	Why string
	// Images is, for EngineRunsc, the engine at URI that holds the images
	// (EnginePodman or EngineDocker); "" for the others.
	Images string
}

// Candidates lists the places to try for engine ("auto", "podman",
// "docker", "kubernetes" or "runsc"; see kubeCandidates for a cluster,
// runscCandidates for runsc), in order:
// $CONTAINER_HOST, rootless Podman ($XDG_RUNTIME_DIR/podman/podman.sock),
// rootful Podman (/run/podman/podman.sock), then $DOCKER_HOST or
// /var/run/docker.sock. An engine this binary was built without (see
// built.go) is never tried, and asking for it is an error.
func Candidates(engine string, getenv func(string) string) ([]Candidate, error) {
	if engine != sandbox.EngineAuto && engine != "" && buildTag(engine) != "" && builtWith(engine) == nil {
		return nil, errBuiltWithout(engine)
	}
	var podman, docker []Candidate
	if h := getenv("CONTAINER_HOST"); h != "" {
		podman = append(podman, Candidate{Engine: sandbox.EnginePodman, URI: h, Why: "$CONTAINER_HOST"})
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		podman = append(podman, Candidate{Engine: sandbox.EnginePodman, URI: "unix://" + filepath.Join(d, "podman", "podman.sock"), Why: "rootless Podman socket"})
	}
	podman = append(podman, Candidate{Engine: sandbox.EnginePodman, URI: "unix:///run/podman/podman.sock", Why: "rootful Podman socket"})
	if h := getenv("DOCKER_HOST"); h != "" {
		docker = append(docker, Candidate{Engine: sandbox.EngineDocker, URI: h, Why: "$DOCKER_HOST"})
	} else {
		docker = append(docker, Candidate{Engine: sandbox.EngineDocker, URI: "unix:///var/run/docker.sock", Why: "default Docker socket"})
	}
	var all []Candidate
	switch engine {
	case sandbox.EngineAuto, "":
		all = append(podman, docker...)
	case sandbox.EnginePodman:
		all = podman
	case sandbox.EngineDocker:
		all = docker
	case sandbox.EngineKubernetes:
		// Never chosen by auto: a cluster is used only when asked for.
		all = kubeCandidates(getenv)
	case sandbox.EngineRunsc:
		// Never chosen by auto: it needs root, and another engine.
		if !haveDocker && !havePodman {
			return nil, fmt.Errorf("the runsc engine takes its images from Docker or Podman, and this bridge was built without both (build tags %s and %s): use a build that has one",
				buildTag(sandbox.EngineDocker), buildTag(sandbox.EnginePodman))
		}
		all = runscCandidates(getenv)
	default:
		return nil, fmt.Errorf("unknown runtime %q: use auto, podman, docker, kubernetes or runsc", engine)
	}
	// The same socket may come from two places ($CONTAINER_HOST and
	// $XDG_RUNTIME_DIR); try it once, under its first reason.
	seen := map[string]bool{}
	var out []Candidate
	for _, c := range all {
		if builtWith(cmp.Or(c.Images, c.Engine)) != nil && !seen[c.URI] {
			seen[c.URI] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// Connect opens the engine behind one candidate.
func Connect(ctx context.Context, c Candidate) (sandbox.Runtime, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if c.Engine == sandbox.EngineRunsc {
		return openRunsc(ctx, c, runscHost{euid: os.Geteuid(), getenv: os.Getenv, inits: defaultInits()})
	}
	if p, ok := strings.CutPrefix(c.URI, "unix://"); ok {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrPermission) {
			// A directory on the way is closed to this user.
			return nil, sandbox.NewAccessError(c.Engine, p, err)
		} else if err != nil {
			return nil, fmt.Errorf("%w: no %s socket at %s", sandbox.ErrEngineUnreachable, c.Engine, p)
		}
	}
	if open := builtWith(c.Engine); open != nil {
		return open(ctx, c.URI)
	}
	if buildTag(c.Engine) != "" {
		return nil, errBuiltWithout(c.Engine)
	}
	return nil, fmt.Errorf("unknown engine %q", c.Engine)
}

// Open connects to the first reachable engine among Candidates(engine) and
// logs which one it picked and why.
func Open(ctx context.Context, engine string, log zerolog.Logger) (sandbox.Runtime, error) {
	return OpenFor(ctx, engine, "", log)
}

// OpenFor is Open for containers that must run with ociRuntime (see
// [sandbox.ExecutorOptions.OCIRuntime]): an engine that cannot run it is passed over
// like one that does not answer. When none can, the error wraps
// ErrOCIRuntime and says what each engine would need. Else, when a socket
// refused this user, it wraps ErrEngineDenied (and ErrEngineUnreachable),
// so that the permission problem comes first and not "start the engine".
// The error also wraps each candidate's.
func OpenFor(ctx context.Context, engine, ociRuntime string, log zerolog.Logger) (sandbox.Runtime, error) {
	if err := sandbox.CheckOCIRuntime(ociRuntime); err != nil {
		return nil, err
	}
	cands, err := Candidates(engine, os.Getenv)
	if err != nil {
		return nil, err
	}
	return openFirst(ctx, cands, ociRuntime, log)
}

// openFirst is OpenFor on the candidates given.
func openFirst(ctx context.Context, cands []Candidate, ociRuntime string, log zerolog.Logger) (sandbox.Runtime, error) {
	var tried []string
	errs := []error{nil} // the sentinel goes first
	var runtimeErr error
	denied := false
	for _, c := range cands {
		rt, err := Connect(ctx, c)
		if err == nil && ociRuntime != "" && ociRuntime != sandbox.OCIRuntimeDefault {
			var info sandbox.EngineInfo
			if info, err = rt.Info(ctx); err == nil {
				if _, _, err = sandbox.ResolveOCIRuntime(info, ociRuntime); err != nil {
					runtimeErr = err
				}
			}
			if err != nil {
				rt.Close()
			}
		}
		if err != nil {
			log.Debug().Err(err).Str("engine", c.Engine).Str("socket", c.URI).Msg("engine not usable")
			tried = append(tried, fmt.Sprintf("%s at %s (%s): %v", c.Engine, c.URI, c.Why, err))
			errs = append(errs, err)
			denied = denied || errors.Is(err, sandbox.ErrEngineDenied)
			continue
		}
		log.Info().Str("engine", c.Engine).Str("socket", c.URI).Str("why", c.Why+" answered first").Msg("container engine selected")
		return rt, nil
	}
	errs[0] = sandbox.ErrEngineUnreachable
	switch {
	case runtimeErr != nil:
		errs[0] = sandbox.ErrOCIRuntime
	case denied:
		errs[0] = sandbox.ErrEngineDenied
	}
	return nil, &openError{
		msg:  fmt.Sprintf("%v: tried\n  %s\nrun `bridge doctor` for what to fix", errs[0], strings.Join(tried, "\n  ")),
		errs: errs,
	}
}

// openError is OpenFor's failure: its text lists every candidate tried, and
// it wraps its sentinel and each candidate's error.
type openError struct {
	msg  string
	errs []error
}

func (e *openError) Error() string   { return e.msg }
func (e *openError) Unwrap() []error { return e.errs }

// HasImage reports whether the first engine among Candidates(engine) that
// answers holds image in its local store. It is for hints on a failure
// path: it gives up after 5 s, and any failure is false.
func HasImage(ctx context.Context, engine, image string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cands, err := Candidates(engine, os.Getenv)
	if err != nil {
		return false
	}
	for _, c := range cands {
		rt, err := Connect(ctx, c)
		if err != nil {
			continue
		}
		_, err = rt.ImageInfo(ctx, image)
		rt.Close()
		return err == nil
	}
	return false
}

// kubeCandidates are the Kubernetes configurations to try: the pod's
// service account when the bridge runs in the cluster, then $KUBECONFIG,
// then ~/.kube/config.
func kubeCandidates(getenv func(string) string) []Candidate {
	var out []Candidate
	if getenv("KUBERNETES_SERVICE_HOST") != "" {
		out = append(out, Candidate{Engine: sandbox.EngineKubernetes, URI: "in-cluster", Why: "the pod's service account"})
	}
	if k := getenv("KUBECONFIG"); k != "" {
		if strings.Contains(k, string(filepath.ListSeparator)) {
			k = "" // a list: client-go's own loading rules merge it
		}
		out = append(out, Candidate{Engine: sandbox.EngineKubernetes, URI: "kubeconfig:" + k, Why: "$KUBECONFIG"})
	} else if h := getenv("HOME"); h != "" {
		out = append(out, Candidate{Engine: sandbox.EngineKubernetes, URI: "kubeconfig:" + filepath.Join(h, ".kube", "config"), Why: "~/.kube/config"})
	}
	return out
}
