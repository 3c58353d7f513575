package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy/catalog"
)

// hintRules is a policy with a rule on each value of each annotation,
// each on a tool of its own, so that Explain words every annotation a tool
// has, declared or MCP default, and whether each rule matched.
const hintRules = `version: 1
tools:
  default: deny
  rules:
    - {tool: "t*", annotations: {readOnlyHint: true}, action: allow}
    - {tool: "t*", annotations: {destructiveHint: false}, action: ask}
    - {tool: "t*", annotations: {idempotentHint: true, openWorldHint: false}, action: allow}
    - {tool: "t*", annotations: {openWorldHint: true, destructiveHint: true}, action: deny, reason: open and destructive}
`

// sameJudgement fails t unless explain, what `bridge policy explain`
// judges a tool by, is gate, what the gate judges it by, down to the
// wording of the explanation under hintRules.
func sameJudgement(t *testing.T, what string, gate, explain policy.Tool) {
	t.Helper()
	if !reflect.DeepEqual(gate, explain) {
		t.Errorf("%s: the gate judges %s, explain %s", what, hints(gate), hints(explain))
	}
	pol, err := policy.Parse([]byte(hintRules), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if g, e := pol.Explain(gate), pol.Explain(explain); g != e {
		t.Errorf("%s: the gate's explanation\n%s\nexplain's\n%s", what, g, e)
	}
}

// hints is t's name and annotations, each true, false or unset.
func hints(t policy.Tool) string {
	a := t.Annotations
	out := t.Server + "/" + t.Name
	for i, h := range []*bool{a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint} {
		v := "unset"
		if h != nil {
			v = strconv.FormatBool(*h)
		}
		out += " " + [...]string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}[i] + "=" + v
	}
	return out
}

// TestToolPolicyOneRule: whatever annotations an upstream lists (none,
// null, each hint alone, given or left out, null values), `bridge policy
// explain`, which reads them from the proxy's listing in a client's
// catalog, judges the tool as the gate does, which reads them from the
// upstream's listing: both after the proxy's SDK wrote them again, and
// as the upstream wrote them.
func TestToolPolicyOneRule(t *testing.T) {
	for _, ann := range []string{"", `null`, `{}`, `{"title":"T"}`,
		`{"readOnlyHint":true}`, `{"readOnlyHint":false}`, `{"destructiveHint":true}`, `{"destructiveHint":false}`,
		`{"idempotentHint":true}`, `{"idempotentHint":false}`, `{"openWorldHint":true}`, `{"openWorldHint":false}`,
		`{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}`,
		`{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":false,"openWorldHint":true}`,
		`{"readOnlyHint":null,"destructiveHint":null,"idempotentHint":null,"openWorldHint":null}`,
	} {
		js := `{"name":"t","inputSchema":{"type":"object"}`
		if ann != "" {
			js += `,"annotations":` + ann
		}
		js += "}"
		// The gate: the upstream's listing as the SDK's client reads it.
		var up mcp.Tool
		if err := json.Unmarshal([]byte(js), &up); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		gate := ToolPolicy("srv", &up)
		// Explain: the proxy lists the definition it got, and the bridge's
		// client reads it into its catalog.
		listed, err := json.Marshal(&up)
		if err != nil {
			t.Fatal(err)
		}
		var got mcp.Tool
		if err := json.Unmarshal(listed, &got); err != nil {
			t.Fatalf("%s: %v", listed, err)
		}
		explain, err := CatalogToolPolicy(catalogTool("srv", "t", &got))
		if err != nil {
			t.Fatalf("%s: %v", listed, err)
		}
		sameJudgement(t, js, gate, explain)
		// The upstream's JSON as it is: what a proxy lists whose SDK
		// leaves false hints out (MCPGODEBUG=hintomitempty=1, or before
		// go-sdk 1.7.0).
		explain, err = CatalogToolPolicy(catalog.Tool{Server: "srv", Name: "t", Annotations: json.RawMessage(ann)})
		if err != nil {
			t.Fatalf("%s: %v", ann, err)
		}
		sameJudgement(t, js+" as listed", gate, explain)
	}
	bad := catalog.Tool{Server: "srv", Name: "t", Annotations: json.RawMessage(`{"readOnlyHint":"yes"}`)}
	if _, err := CatalogToolPolicy(bad); err == nil {
		t.Error("annotations that are not the MCP's were read")
	}
}

// TestToolPolicyGateAndCatalog: through a real proxy, what a client's
// catalog says of each tool judges it as the gate's own record of the
// tool's definition (checked, which each call is decided on).
func TestToolPolicyGateAndCatalog(t *testing.T) {
	yes, no := true, false
	anns := map[string]*mcp.ToolAnnotations{
		"t_none":        nil,
		"t_empty":       {},
		"t_readonly":    {ReadOnlyHint: true},
		"t_additive":    {DestructiveHint: &no},
		"t_destructive": {DestructiveHint: &yes},
		"t_idempotent":  {IdempotentHint: true, OpenWorldHint: &no},
		"t_open":        {OpenWorldHint: &yes, Title: "Open"},
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "hints"}, nil)
	for name, a := range anns {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}, Annotations: a},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer hs.Close()
	p := New(Config{Servers: []ServerConfig{{Name: "up", Type: TypeHTTP, URL: hs.URL}}}, Options{Logger: zerolog.Nop()})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := p.Connect(ctx, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cat, err := c.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name := range anns {
		ct, ok := cat.Lookup("up", name)
		if !ok {
			t.Errorf("%s: not in the catalog", name)
			continue
		}
		explain, err := CatalogToolPolicy(ct)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		gate, _, _, _ := p.checked("up", name)
		sameJudgement(t, name, gate, explain)
	}
}
