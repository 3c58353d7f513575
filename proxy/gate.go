package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
)

// call is callTool with the failure as an error (an *[Error]) and the
// result's JSON too: it is encoded once, for its size, and a bridge in the
// same process sends those bytes on as they are (see [Client.CallJSON]).
//
// With wantRaw, the caller needs only the result's JSON: a big one is then
// passed on as the server wrote it, and the returned result is an empty
// stand-in (raw.go). asker asks the human when the policy says ask (nil:
// tools.ask_fallback); report, if set, is filled in. Its steps: the gate,
// the upstream, the result, each recorded.
func (p *Proxy) call(ctx context.Context, params *mcp.CallToolParamsRaw, server, tool string, wantRaw bool, asker Asker, report *CallReport) (*mcp.CallToolResult, []byte, error) {
	runID, _ := params.Meta[MetaRunID].(string)
	if report == nil {
		report = &CallReport{}
	}
	c := &callRecord{p: p, start: time.Now(), rec: policy.Call{RunID: runID, Server: server, Tool: tool, ArgumentBytes: len(params.Arguments)}}
	gctx, span := p.tracer().Start(ctx, spanGate)
	g, err := p.gate(gctx, c, params, asker, report)
	endGate(span, report, c.rec.Rule, err)
	if err != nil {
		return nil, nil, err
	}
	if report.Decision == "" {
		report.Decision = "allow" // no policy
	}
	upStart := time.Now()
	uctx, span := p.startUpstream(ctx, server, tool)
	var res *mcp.CallToolResult
	var raw []byte
	if u := p.byName[server]; g.sess.s != nil {
		res, raw, err = u.callOn(uctx, g.sess, tool, g.callArgs(), g.timeout, wantRaw)
	} else {
		// No policy: nothing a pin says decides the call.
		res, raw, err = u.call(uctx, tool, g.callArgs(), g.timeout, wantRaw)
	}
	endUpstream(span, res, raw, err)
	report.Upstream = time.Since(upStart)
	if g.tokens == nil {
		res, js, err := resultJSON(server, tool, res, raw, err, g.maxResult, &c.rec)
		return c.finish(res, js, err)
	}
	// Tokenized, the result is measured as the code gets it, and no size
	// is stated: the size of the untokenized one would tell the length of
	// the values hidden. A bound on what is tokenized at all still holds.
	res, js, err := resultJSON(server, tool, res, raw, err, 0, &c.rec)
	overMax := func() error {
		return errorf(KindLimit, "the result of %s/%s is over the policy's budgets.max_result_bytes (%d bytes, counted after tokenization)",
			server, tool, g.maxResult)
	}
	switch {
	case err != nil:
		err = g.tokens.applyError(err)
	case g.maxResult > 0 && int64(len(js)) > tokenizeBound(g.maxResult):
		res, js, err = nil, nil, overMax()
	default:
		res, js, err = g.tokens.apply(res, js, wantRaw)
		if err == nil && g.maxResult > 0 && int64(len(js)) > g.maxResult {
			res, js, err = nil, nil, overMax()
		}
	}
	return c.finish(res, js, err)
}

// callRecord is the audit record of one call, and how it is written.
type callRecord struct {
	p     *Proxy
	start time.Time
	rec   policy.Call
	run   *policy.Run // the call's run, once the gate found it
	// resource marks a resource listing or read (resources.go): audited,
	// but not counted in the tool-call metrics.
	resource bool
}

// write records the call with the policy's store, if there is one, and in
// the metrics: refused is the kind of the refusal ("" for a call that went
// to its upstream).
func (c *callRecord) write(refused string) {
	if store := c.p.opts.Policy; store != nil {
		store.Record(c.run, c.rec)
	}
	m := c.p.opts.Metrics
	if m == nil || c.resource {
		return
	}
	decision := "allowed"
	switch {
	case c.rec.Asked != "":
		decision = "asked"
		m.Ask(c.rec.Asked)
	case refused == KindDenied:
		decision = "denied"
	case refused != "":
		decision = "refused"
	}
	if refused == KindLimit && c.rec.Rule != "" {
		m.Cutoff(c.rec.Rule)
	}
	u := c.p.byName[c.rec.Server]
	m.ToolCall(c.rec.Server, c.rec.Tool, u != nil, u != nil && u.hasTool(c.rec.Tool), decision, refused == "", c.rec.Duration)
}

// refuse records a call refused by rule and returns its error.
func (c *callRecord) refuse(kind, rule, msg string) error {
	c.rec.Rule, c.rec.Duration = rule, time.Since(c.start)
	c.write(kind)
	c.p.log.Debug().Str("run_id", c.rec.RunID).Str("server", c.rec.Server).Str("tool", c.rec.Tool).Str("rule", rule).Msg("proxy: call refused")
	return &Error{Kind: kind, Message: msg}
}

// finish records a call that went to its upstream, and returns its end.
func (c *callRecord) finish(res *mcp.CallToolResult, js []byte, err error) (*mcp.CallToolResult, []byte, error) {
	c.rec.Duration = time.Since(c.start)
	ev := c.p.log.Debug().Str("run_id", c.rec.RunID).Str("server", c.rec.Server).Str("tool", c.rec.Tool).Dur("took", c.rec.Duration)
	if err != nil {
		c.rec.Error = KindUpstream
		var pe *Error
		if errors.As(err, &pe) {
			c.rec.Error = pe.Kind
		}
		if c.rec.Error == KindLimit && !c.resource {
			// A result over budgets.max_result_bytes.
			c.p.opts.Metrics.Cutoff("budgets.max_result_bytes")
		}
		c.write("")
		// The kind, not the message: an upstream's error may quote the
		// arguments the code sent, and the code must not write into the
		// logs (the code gets the message).
		ev.Str("error", c.rec.Error).Msg("proxy: call failed")
		return nil, nil, err
	}
	c.write("")
	ev.Bool("is_error", res.IsError).Msg("proxy: call")
	return res, js, nil
}

// gated is what the policy's gate let through of one call: its timeout,
// the largest result it may have, its arguments (with tokenized values
// restored), what tokenizes its result, and the session it goes on (the
// one whose server text and tools the gate decided on; none without a
// policy).
type gated struct {
	timeout   time.Duration
	maxResult int64
	args      json.RawMessage
	tokens    *callTokens // nil: nothing to tokenize
	sess      live
}

// callArgs are the arguments as the upstream gets them: an empty object
// for none.
func (g gated) callArgs() any {
	if len(g.args) == 0 {
		return map[string]any{}
	}
	return g.args
}

// refuseRun refuses a call whose run (or session's vault) the Store
// refused: a limit, or an invalid id whose value is never written.
func (c *callRecord) refuseRun(err error) error {
	kind, rule := KindLimit, ""
	var rr *policy.RunRefused
	if errors.As(err, &rr) {
		rule = rr.Rule
		if rr.Invalid {
			kind, c.rec.RunID = KindInvalid, "" // never write what a client made up
		}
	}
	return c.refuse(kind, rule, err.Error())
}

// gate applies the policy to a call, in order: the run and its call
// budget, the server, the tool's rule, the argument size, the human when
// the rule asks (never about a call refused anyway), the rates, and the
// restoring of tokenized values. A refusal is recorded and returned as an
// *[Error]. Without a policy every call goes through.
func (p *Proxy) gate(ctx context.Context, c *callRecord, params *mcp.CallToolParamsRaw, asker Asker, report *CallReport) (gated, error) {
	g := gated{args: json.RawMessage(params.Arguments)}
	store := p.opts.Policy
	if store == nil {
		return g, nil
	}
	server, tool, runID := c.rec.Server, c.rec.Tool, c.rec.RunID
	snap := store.Current()
	if runID != "" {
		run, err := store.Remote(runID, runDeadline(params.Meta, c.start))
		if err != nil {
			return g, c.refuseRun(err)
		}
		if key, _ := params.Meta[MetaVault].(string); key != "" && run.Snap.Policy.Tokenize.On() {
			// A session's run: its values are the session's.
			if err := store.ShareVault(run, key, metaTime(params.Meta, MetaVaultTimeLeft, c.start)); err != nil {
				return g, c.refuseRun(err)
			}
		}
		c.run, snap = run, run.Snap
	}
	pol := snap.Policy
	// Every call counts against the run's budget, refused ones too: code
	// looping on a denied tool must run out.
	if c.run != nil && !c.run.TakeCall() {
		return g, c.refuse(KindLimit, "budgets.max_calls_per_run", fmt.Sprintf(
			"this run has made the %d tool calls the policy allows (budgets.max_calls_per_run)", pol.Budgets.MaxCallsPerRun))
	}
	if !pol.ServerAllowed(server) {
		d := pol.Decide(policy.Tool{Server: server, Name: tool})
		report.Decision = d.Verdict()
		return g, c.refuse(KindDenied, pol.RuleName(d), d.Reason)
	}
	v, err := p.decide(ctx, c, pol, report)
	if err != nil {
		return g, err
	}
	d := v.d
	g.sess = v.sess
	if err := p.onChange(c, pol, &d, report, v.toolChanged, v.srvChanged); err != nil {
		return g, err
	}
	if max := pol.Budgets.MaxArgumentBytes; int64(c.rec.ArgumentBytes) > max {
		return g, c.refuse(KindLimit, "budgets.max_argument_bytes", fmt.Sprintf(
			"the arguments to %s/%s are %d bytes, over the policy's budgets.max_argument_bytes (%d)", server, tool, c.rec.ArgumentBytes, max))
	}
	if d.Ask {
		actx, span := p.tracer().Start(ctx, spanAsk)
		ans, why := ask(actx, asker, pol, Question{RunID: runID, Server: server, Tool: tool, Reason: d.Reason,
			Arguments: SummarizeArguments(params.Arguments, maxArgumentSummary),
			Timeout:   pol.Tools.AskTimeout, Remember: pol.Tools.AskRemember, Limit: pol.Tools.AskMaxPerRun})
		span.SetAttributes(AttrAnswer.String(ans.How))
		span.End()
		c.rec.Asked, report.Asked = ans.How, ans.How
		if !ans.Allow {
			return g, c.refuse(KindDenied, c.rec.Rule, why)
		}
	}
	// Rates are shared by every run, whichever policy version it has: the
	// buckets of the policy in force.
	lim := store.Current().Limiter
	if ok, r, retry := lim.Take(server, tool); !ok {
		return g, c.refuse(KindLimit, lim.RateName(r), fmt.Sprintf(
			"%s reached; the next call can go in %s", lim.Describe(r, server, tool), retry.Round(time.Millisecond)))
	}
	g.timeout, g.maxResult = pol.Budgets.CallTimeout, pol.Budgets.MaxResultBytes
	if g.args, g.tokens, err = p.tokens(pol, c.run, server, tool, g.args); err != nil {
		return g, c.refuse(KindInvalid, "tokenize.restore", err.Error())
	}
	c.rec.Allowed = true
	return g, nil
}

// decided is the tool's rule for one call, what changed since its pins,
// and the session the call goes on, all of one checked session.
type decided struct {
	d                       policy.Decision
	toolChanged, srvChanged string
	sess                    live
}

// decide applies the tool's rule to a call, on the definition checked
// against its pin, read at once with what changed (pins.go), for the
// session the call will go on: a call refused on what the bridge knows
// starts no server; one let through gets its checked session
// (checkedSession), and if that is a new one (the server restarted: its
// text and tools were just checked against their pins) it is decided
// again on what that session said. A call never goes on a session whose
// text and tools the rule and tools.on_change did not see. An upstream
// that cannot be reached fails the call, audited as such.
func (p *Proxy) decide(ctx context.Context, c *callRecord, pol *policy.Policy, report *CallReport) (decided, error) {
	server, tool := c.rec.Server, c.rec.Tool
	var v decided
	for again := false; ; again = true {
		pt, toolChanged, srvChanged, gen := p.checked(server, tool)
		v.d, v.toolChanged, v.srvChanged = pol.Decide(pt), toolChanged, srvChanged
		c.rec.Rule, report.Decision = pol.RuleName(v.d), v.d.Verdict()
		if !v.d.Allow && !v.d.Ask {
			return v, c.refuse(KindDenied, c.rec.Rule, v.d.Reason)
		}
		if again {
			return v, nil
		}
		sess, err := p.checkedSession(ctx, p.byName[server])
		if err != nil {
			// As a call whose upstream failed: the policy did not refuse it.
			c.rec.Allowed = true
			_, _, err = c.finish(nil, nil, err)
			return v, err
		}
		v.sess = sess
		if sess.gen == gen {
			return v, nil
		}
	}
}

// onChange applies tools.on_change to a call whose tool's definition, or
// whose server's own text, changed since the bridge pinned it (pins.go): a
// rug pull, the tool reviewed is not the tool called. toolChanged and
// srvChanged say what changed (checked). ask turns d into a question,
// allow lets it be (audited under the rule), deny refuses it.
func (p *Proxy) onChange(c *callRecord, pol *policy.Policy, d *policy.Decision, report *CallReport, toolChanged, srvChanged string) error {
	server, tool := c.rec.Server, c.rec.Tool
	if toolChanged == "" && srvChanged == "" {
		return nil
	}
	switch pol.Tools.OnChange {
	case policy.Ask:
		var why []string
		if toolChanged != "" {
			why = append(why, fmt.Sprintf("the tool's %s changed since the bridge first listed it: it may not be the tool you reviewed", toolChanged))
		}
		if srvChanged != "" {
			why = append(why, fmt.Sprintf("what the server says about itself (%s) changed since the bridge first connected to it: it may not be the server you reviewed", srvChanged))
		}
		d.Ask, d.Allow = true, false
		d.Reason = strings.Join(why, "; ")
		c.rec.Rule, report.Decision = "tools.on_change", d.Verdict()
	case policy.Allow:
		c.rec.Rule = "tools.on_change"
	default:
		report.Decision = "deny"
		if toolChanged != "" {
			return c.refuse(KindDenied, "tools.on_change", fmt.Sprintf(
				"the definition of %s/%s changed since the bridge first listed it (%s), and the policy refuses a changed tool (tools.on_change: deny): "+
					"the tool reviewed is not the tool that would be called; the operator can review it and restart the bridge", server, tool, toolChanged))
		}
		return c.refuse(KindDenied, "tools.on_change", fmt.Sprintf(
			"what server %s says about itself changed since the bridge first connected to it (%s), and the policy refuses the tools of a changed server (tools.on_change: deny): "+
				"the server reviewed is not the server that would be called; the operator can review it and restart the bridge", server, srvChanged))
	}
	return nil
}

// tokenizeBound is the most of an untokenized result the proxy tokenizes,
// for a policy's max_result_bytes: twice it and 64 KiB more. Both refusals
// say the same, without a size; but a placeholder can be much shorter than
// its value (a long pattern match), so a result refused here might have
// fitted once tokenized: that its hidden values are very long shows at
// this coarse bound (docs/security.md).
func tokenizeBound(maxResult int64) int64 {
	if maxResult <= 0 {
		return 0
	}
	return 2*maxResult + 64<<10
}

// resultJSON is an upstream's answer as the proxy hands it on: its JSON,
// encoded once (or, raw, as the upstream wrote it), measured against
// maxResult (0: no bound), and a failure the upstream claims to be the
// proxy's own taken out. rec gets the result's size.
func resultJSON(server, tool string, res *mcp.CallToolResult, raw []byte, err error, maxResult int64, rec *policy.Call) (*mcp.CallToolResult, []byte, error) {
	if raw != nil && bytes.Contains(raw, []byte(MetaError)) {
		// It may claim to be the proxy's own failure: decode it, and let
		// the usual way below take that claim out.
		res = &mcp.CallToolResult{}
		if jerr := json.Unmarshal(raw, res); jerr != nil {
			res, err = nil, errorf(KindUpstream, "the result of %s/%s is not a tool result: %v", server, tool, jerr)
		}
		raw = nil
	}
	if err != nil {
		return nil, nil, err
	}
	js := raw
	if js == nil {
		if _, ok := res.Meta[MetaError]; ok {
			// Only the proxy says a failure was its own.
			meta := mcp.Meta{}
			for k, v := range res.Meta {
				if k != MetaError {
					meta[k] = v
				}
			}
			res.Meta = meta
		}
		var jerr error
		if js, jerr = encodeResult(res); jerr != nil {
			return nil, nil, errorf(KindUpstream, "the result of %s/%s cannot be encoded: %v", server, tool, jerr)
		}
	}
	rec.ResultBytes = len(js)
	if maxResult > 0 && int64(rec.ResultBytes) > maxResult {
		return nil, nil, errorf(KindLimit, "the result of %s/%s is %d bytes, over the policy's budgets.max_result_bytes (%d)",
			server, tool, rec.ResultBytes, maxResult)
	}
	return res, js, nil
}

// localCall answers the call of a bridge in the same process without the
// MCP hop between them: the same checks and policy as a tools/call, with
// the result's JSON. known is false for a (server, tool) no upstream lists.
// With wantRaw, only js is wanted (see call).
func (p *Proxy) localCall(ctx context.Context, params *mcp.CallToolParamsRaw, server, tool string, wantRaw bool, asker Asker, report *CallReport) (res *mcp.CallToolResult, js []byte, known bool, err error) {
	p.regMu.Lock()
	k, ok := p.known[ToolName(server, tool)]
	p.regMu.Unlock()
	if !ok || k != [2]string{server, tool} {
		return nil, nil, false, nil
	}
	if report == nil {
		report = &CallReport{}
	}
	report.Server, report.Tool = server, tool // an upstream's listed tool
	ctx, span := p.startCall(ctx, params.Meta, nil, trace.SpanKindInternal, server, tool)
	res, js, err = p.call(ctx, params, server, tool, wantRaw, asker, report)
	ri := resultInfo{bytes: len(js)}
	if res != nil {
		ri.isError = res.IsError
	}
	endCall(span, report, ri, err)
	return res, js, true, err
}

// hasTool says whether the server's last tool list has tool.
func (u *upstream) hasTool(tool string) bool {
	for _, t := range u.cachedTools() {
		if t.Name == tool {
			return true
		}
	}
	return false
}
