package proxy

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy/catalog"
)

// ToolPolicy is what the policy decides on for server's tool t: its name
// and its annotations. It is the gate's one rule for this, which `bridge
// policy explain` reaches through [CatalogToolPolicy], so that explain
// cannot judge a tool otherwise than the gate. The MCP SDK reads
// readOnlyHint and idempotentHint as plain booleans, so a tool that
// declares any annotation declares those two (false when it left them
// out); a tool that declares none has every hint at its MCP default.
func ToolPolicy(server string, t *mcp.Tool) policy.Tool {
	pt := policy.Tool{Server: server, Name: t.Name}
	if a := t.Annotations; a != nil {
		pt.Annotations.ReadOnlyHint = &a.ReadOnlyHint
		pt.Annotations.DestructiveHint = a.DestructiveHint
		pt.Annotations.IdempotentHint = &a.IdempotentHint
		pt.Annotations.OpenWorldHint = a.OpenWorldHint
	}
	return pt
}

// CatalogToolPolicy is [ToolPolicy] for a tool of a [Client]'s catalog,
// whose annotations are the JSON the proxy listed: they are read as the
// MCP SDK reads them, into an [mcp.ToolAnnotations], and the result is
// what the gate decides on for that definition.
func CatalogToolPolicy(t catalog.Tool) (policy.Tool, error) {
	def := mcp.Tool{Name: t.Name}
	// JSON null, like no annotations at all, leaves def.Annotations nil.
	if len(t.Annotations) > 0 {
		if err := json.Unmarshal(t.Annotations, &def.Annotations); err != nil {
			return policy.Tool{}, err
		}
	}
	return ToolPolicy(t.Server, &def), nil
}
