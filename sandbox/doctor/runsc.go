package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/sandbox/detect"
)

// runscRootHint is what to do when the runsc engine is asked for by a user
// who is not root.
const runscRootHint = "the runsc engine drives runsc itself, which needs root: run the bridge as root, " +
	"or use --runtime docker or podman with --oci-runtime runsc (gVisor without memory snapshots)"

// runscChecks records what the runsc engine needs of this host before it
// can be opened: runsc (its version), root, and the engine that holds the
// images. ok is false when one is missing: opening it would only fail.
func (er *EngineReport) runscChecks(ctx context.Context, c detect.Candidate, opts Options) (ok bool) {
	path, err := opts.LookPath("runsc")
	detail := "not installed on this machine"
	if err == nil {
		detail = path + " " + runscVersion(ctx, path)
	}
	ok = er.add("runsc", err == nil, detail,
		"install gVisor (Debian and Ubuntu: `apt-get install runsc`; else https://gvisor.dev/docs/user_guide/install/)")
	euid := os.Geteuid()
	if opts.euid != nil {
		euid = opts.euid()
	}
	ok = er.add("root", euid == 0, fmt.Sprintf("the bridge runs as uid %d", euid), runscRootHint) && ok
	imgs := detect.Candidate{Engine: c.Images, URI: c.URI, Why: c.Why}
	rt, err := detect.Connect(ctx, imgs)
	if err != nil {
		chk := unreachableCheck(imgs, err)
		chk.Name, chk.Detail = "images_engine", "the images' engine: "+chk.Detail
		er.addCheck(chk)
		return false
	}
	rt.Close()
	return er.add("images_engine", true, fmt.Sprintf("images from %s at %s", c.Images, c.URI), "") && ok
}

// runscVersion is runsc's version line, or why it could not be read.
func runscVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return fmt.Sprintf("(--version failed: %v)", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
