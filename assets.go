// Package assets embeds the repository files that the bridge binary ships:
// the build contexts of the runner images, so that `bridge image build`
// works from the binary alone.
package assets

import "embed"

// RunnerContext holds Dockerfile.runner, the runner and its lib/ (the mcp_tools
// package, the notebook habits and the IPython stand-in), at the paths the
// Dockerfile expects relative to the build context.
//
//go:embed Dockerfile.runner images/runner/runner.py images/runner/lib/mcp_tools/*.py images/runner/lib/skills.py
//go:embed images/runner/lib/_bridge_notebook.py images/runner/lib/_fallback/IPython/*.py
var RunnerContext embed.FS

// RunnerDockerfile is the path of the Dockerfile inside RunnerContext.
const RunnerDockerfile = "Dockerfile.runner"

// CustomDockerfile builds an operator's Debian packages and Python wheels
// onto a runner image (`bridge image build --apt PKG --wheels DIR`).
//
//go:embed images/Dockerfile.custom
var CustomDockerfile string
