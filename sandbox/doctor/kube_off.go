//go:build bridge_no_kubernetes

package doctor

import (
	"context"

	"github.com/bridge-mcp/bridge/sandbox"
)

// engineChecks has nothing to check: this binary was built without the
// kubernetes engine, the one with checks of its own.
func engineChecks(context.Context, sandbox.Runtime, func(string, bool, string, string) bool, func(Check)) {
}
