package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/internal/tokenize"
	"github.com/bridge-mcp/bridge/policy"
)

// Tokenization (policy tokenize): the values of personal data in the
// results of some tools reach the sandbox as per-run placeholders, put back
// in the arguments of the tools allowed to receive them. The run's vault
// (policy.Run.Vault) holds the mapping, in this process's memory only.

// resultTokens tokenizes one call's result.
type resultTokens struct {
	vault *tokenize.Vault
	kinds []tokenize.Kind // none: only the values the vault holds
	max   int             // tokenize.max_values, for the error
}

// tokens prepares one call of server's tool for tokenization: args with
// the placeholders it may have put back when the tool may receive them,
// and what tokenizes its result (nil when nothing would).
func (p *Proxy) tokens(pol *policy.Policy, run *policy.Run, server, tool string, args json.RawMessage) (json.RawMessage, *resultTokens, error) {
	tk := &pol.Tokenize
	if !tk.On() {
		return args, nil, nil
	}
	if run.HoldsValues() && tk.Restores(server, tool) && len(args) > 0 {
		out, _, err := run.Vault().Restore(args)
		if err != nil {
			return nil, nil, fmt.Errorf("the arguments to %s/%s are not a JSON object", server, tool)
		}
		args = out
	}
	rt := &resultTokens{max: tk.MaxValues}
	switch {
	case tk.Tokenizes(server, tool):
		rt.kinds = p.kinds.of(pol)
		if run != nil {
			rt.vault = run.Vault()
		} else {
			// A call with no run: placeholders no later call can restore.
			rt.vault = tokenize.NewVault(tk.MaxValues, maxVaultBytes)
		}
	case run.HoldsValues():
		rt.vault = run.Vault() // a value the run holds never gets in again
	default:
		return args, nil, nil
	}
	return args, rt, nil
}

// maxVaultBytes bounds the values of a vault made for one call with no run.
const maxVaultBytes = 16 << 20

// apply tokenizes the result js (and res, unless only js is wanted).
func (rt *resultTokens) apply(res *mcp.CallToolResult, js []byte, wantRaw bool) (*mcp.CallToolResult, []byte, error) {
	out, n, err := rt.vault.Tokenize(js, rt.kinds)
	switch {
	case errors.Is(err, tokenize.ErrFull):
		return nil, nil, fmt.Errorf("it would make the run hold more personal values than the policy's tokenize.max_values (%d); it is not passed on", rt.max)
	case err != nil:
		return nil, nil, fmt.Errorf("it cannot be tokenized (%v); it is not passed on", err)
	case n == 0:
		return res, js, nil
	}
	if wantRaw {
		return &mcp.CallToolResult{}, out, nil
	}
	res = &mcp.CallToolResult{}
	if err := json.Unmarshal(out, res); err != nil {
		return nil, nil, fmt.Errorf("it cannot be tokenized (%v); it is not passed on", err)
	}
	return res, out, nil
}

// kindCache holds the compiled kinds of the latest policy that tokenizes.
type kindCache struct {
	mu    sync.Mutex
	pol   *policy.Policy
	kinds []tokenize.Kind
}

// of is pol's kinds, compiled. Parse checked them, so none fails here.
func (c *kindCache) of(pol *policy.Policy) []tokenize.Kind {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pol == pol {
		return c.kinds
	}
	var kinds []tokenize.Kind
	for _, name := range pol.Tokenize.Kinds {
		if k, ok := tokenize.Builtin(name); ok {
			kinds = append(kinds, k)
		}
	}
	for _, pt := range pol.Tokenize.Patterns {
		if k, err := tokenize.Pattern(pt.Name, pt.Regex); err == nil {
			kinds = append(kinds, k)
		}
	}
	c.pol, c.kinds = pol, kinds
	return kinds
}
