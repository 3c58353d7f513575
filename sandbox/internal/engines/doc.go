// Package engines holds what the engine packages (sandbox/docker,
// sandbox/podman, sandbox/kubernetes) share and the core does not need:
// the bridge's seccomp profile (seccomp.go), refusing a container the
// engine made other than asked and removing it (refuse.go, warnings.go),
// and the bounded tail of a container's log (logtail.go).
package engines
