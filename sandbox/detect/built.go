package detect

import (
	"context"
	"fmt"

	"github.com/bridge-mcp/bridge/sandbox"
)

// opener opens one engine at a candidate's URI.
type opener func(ctx context.Context, uri string) (sandbox.Runtime, error)

// builtWith is how to open engine, or nil when this binary was built
// without it (or it is no engine). A build tag leaves an engine and its
// client out (buildTag): a Docker-only operator can ship a bridge without
// Podman's and Kubernetes' clients.
func builtWith(engine string) opener {
	switch {
	case engine == sandbox.EngineDocker && haveDocker:
		return openDocker
	case engine == sandbox.EnginePodman && havePodman:
		return openPodman
	case engine == sandbox.EngineKubernetes && haveKubernetes:
		return openKubernetes
	}
	return nil
}

// buildTag is the build tag that leaves engine out, "" for no engine.
func buildTag(engine string) string {
	switch engine {
	case sandbox.EngineDocker, sandbox.EnginePodman, sandbox.EngineKubernetes:
		return "bridge_no_" + engine
	}
	return ""
}

// errBuiltWithout is the error for an engine this binary was built without.
func errBuiltWithout(engine string) error {
	return fmt.Errorf("this bridge was built without the %s engine (build tag %s): use a build that has it, or another engine", engine, buildTag(engine))
}
