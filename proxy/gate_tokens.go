package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/internal/tokenize"
	"github.com/bridge-mcp/bridge/policy"
)

// Tokenization (policy tokenize): the values of personal data in the
// results of some tools reach the sandbox as per-run placeholders, put back
// in the arguments of the tools allowed to receive them. The run's vault
// ([policy.Run.Vault]) holds the mapping, in this process's memory only.

// callTokens is tokenization for one call: set up before it (restore), and
// applied to what comes back, result or error.
type callTokens struct {
	p      *Proxy
	pol    *policy.Policy
	run    *policy.Run
	vault  *tokenize.Vault // a run's, or one for a call with no run
	search bool            // look for new values: the tool is in tokenize.results
	// sent are the arguments as the code sent them (placeholders, not
	// values), for a tool not in tokenize.results: what it sent comes back
	// as it wrote it (TokenizeReply), so that an echo of a guess does not
	// say whether the run holds it. A tool in results is a source of
	// personal data: its results are tokenized whatever the code sent,
	// else a genuine value would come back in clear exactly when guessed.
	sent json.RawMessage
}

// tokens prepares one call of server's tool: args with the placeholders
// put back when the tool may receive them, and what tokenizes what comes
// back (nil when tokenization is off).
func (p *Proxy) tokens(pol *policy.Policy, run *policy.Run, server, tool string, args json.RawMessage) (json.RawMessage, *callTokens, error) {
	tk := &pol.Tokenize
	if !tk.On() {
		return args, nil, nil
	}
	sent := args
	if run.HoldsValues() && tk.Restores(server, tool) && len(args) > 0 {
		out, _, err := run.Vault().Restore(args)
		if err != nil {
			return nil, nil, fmt.Errorf("the arguments to %s/%s are not a JSON object", server, tool)
		}
		args = out
	}
	ct := &callTokens{p: p, pol: pol, run: run, search: tk.Tokenizes(server, tool)}
	if !ct.search {
		ct.sent = sent
	}
	if run == nil && ct.search {
		// A call with no run: placeholders no later call can restore.
		ct.vault = tokenize.NewVault(tk.MaxValues, policy.MaxVaultBytes)
	}
	return args, ct, nil
}

// vaultNow is the vault to apply to what came back: decided when it comes
// back, since a concurrent call of the run may have tokenized a value
// meanwhile. nil when there is nothing to do.
func (ct *callTokens) vaultNow() *tokenize.Vault {
	switch {
	case ct.vault != nil:
		return ct.vault
	case ct.run != nil && (ct.search || ct.run.HoldsValues()):
		return ct.run.Vault()
	}
	return nil
}

// apply tokenizes the result js (and res, unless only js is wanted). A
// result it cannot tokenize is refused.
func (ct *callTokens) apply(res *mcp.CallToolResult, js []byte, wantRaw bool) (*mcp.CallToolResult, []byte, error) {
	v := ct.vaultNow()
	if v == nil {
		return res, js, nil
	}
	kinds, err := ct.kinds()
	if err != nil {
		return nil, nil, err
	}
	out, n, err := v.TokenizeReply(js, kinds, ct.sent)
	if err != nil {
		return nil, nil, ct.refusal(err)
	}
	if n == 0 {
		return res, js, nil
	}
	if wantRaw {
		return &mcp.CallToolResult{}, out, nil
	}
	res = &mcp.CallToolResult{}
	if err := json.Unmarshal(out, res); err != nil {
		return nil, nil, ct.refusal(err)
	}
	return res, out, nil
}

// applyError tokenizes the message of a failed call: an upstream's error
// may quote the arguments it got, real values included.
func (ct *callTokens) applyError(err error) error {
	v := ct.vaultNow()
	if v == nil {
		return err
	}
	kind := KindUpstream
	var pe *Error
	if errors.As(err, &pe) {
		kind = pe.Kind
	}
	js, _ := json.Marshal(err.Error())
	kinds, kerr := ct.kinds()
	out, n, terr := v.TokenizeReply(js, kinds, ct.sent)
	var msg string
	if kerr != nil || terr != nil || json.Unmarshal(out, &msg) != nil {
		return &Error{Kind: kind, Message: "the call failed, and its error message cannot be tokenized, so it is not passed on"}
	}
	if n == 0 {
		return err
	}
	return &Error{Kind: kind, Message: msg}
}

// kinds are what to look for in what comes back: the policy's kinds for a
// tool in tokenize.results, none otherwise (the values held still are).
func (ct *callTokens) kinds() ([]tokenize.Kind, error) {
	if !ct.search {
		return nil, nil
	}
	return ct.p.kinds.of(ct.pol)
}

// refusal says why a result that could not be tokenized is not passed on.
func (ct *callTokens) refusal(err error) error {
	if errors.Is(err, tokenize.ErrFull) {
		return &Error{Kind: KindLimit, Message: fmt.Sprintf(
			"the result would make the run hold more personal values than the policy's tokenize.max_values (%d); it is not passed on"+
				" (a session's calls share their values: a session ends, and forgets them, with reset: true)", ct.pol.Tokenize.MaxValues)}
	}
	return &Error{Kind: KindUpstream, Message: fmt.Sprintf("the result cannot be tokenized (%v); it is not passed on", err)}
}

// kindCache holds the compiled kinds of the policies that tokenize, by
// policy: the one in force and those runs are pinned to.
type kindCache struct {
	mu sync.Mutex
	m  map[*policy.Policy][]tokenize.Kind
}

// maxKindPolicies bounds the policies kindCache holds.
const maxKindPolicies = 8

// of is pol's kinds, compiled. Parse checked them; one that fails still
// is an error, never a kind left out.
func (c *kindCache) of(pol *policy.Policy) ([]tokenize.Kind, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if kinds, ok := c.m[pol]; ok {
		return kinds, nil
	}
	kinds, err := policy.TokenKindsOf(&pol.Tokenize)
	if err != nil {
		return nil, &Error{Kind: KindInvalid, Message: "the policy's tokenize kinds: " + strings.TrimPrefix(err.Error(), "tokenize: ")}
	}
	if c.m == nil || len(c.m) >= maxKindPolicies {
		c.m = map[*policy.Policy][]tokenize.Kind{}
	}
	c.m[pol] = kinds
	return kinds, nil
}
