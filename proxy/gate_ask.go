package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
)

// Question is what the human is asked before a call that a policy rule
// with action ask decides.
type Question struct {
	RunID        string
	Server, Tool string
	// Reason is the rule's reason, or one naming the rule.
	Reason string
	// Arguments summarizes the call's arguments as the code sent them
	// (SummarizeArguments): never the whole of them.
	Arguments string
	// Timeout is how long the human has to answer (tools.ask_timeout).
	Timeout time.Duration
	// Remember is the longest an answer may be remembered
	// (tools.ask_remember).
	Remember string
	// Limit is the most questions the run may put to the human
	// (tools.ask_max_per_run); the [Asker] keeps the count.
	Limit int
}

// How the human answered, as audited ([policy.Call.Asked]) and traced.
const (
	Accepted    = "accepted"
	Declined    = "declined"
	Cancelled   = "cancelled"
	TimedOut    = "timeout"
	Remembered  = "remembered"
	Failed      = "failed" // the client could not ask: it answered the elicitation with an error
	Fallback    = "fallback"
	Unsupported = "unsupported" // an Asker's answer: it cannot ask; the proxy then applies tools.ask_fallback
	// Withheld: the Asker did not put the question, so as not to flood
	// the human: an earlier question of the run was dismissed, went
	// unanswered or could not be asked, or the run put its Limit of
	// questions. Answer.Why says which.
	Withheld = "withheld"
)

// Answer is the human's answer to a [Question].
type Answer struct {
	Allow bool
	How   string // one of the constants above
	// Why says, for an answer Withheld, why the question was not put;
	// for Unsupported, why no one can be asked (and what to do), in place
	// of the client's lack of MCP elicitation.
	Why string
}

// An [Asker] asks the human whether a call may go ahead, and waits for the
// answer, at most until ctx is done (the proxy bounds it by
// tools.ask_timeout and the run's deadline).
type Asker interface {
	Ask(ctx context.Context, q Question) Answer
}

// ask asks the human, through a (nil: there is no one to ask), about a
// call the policy decided to ask about, and says why not when the answer
// is no.
func ask(ctx context.Context, a Asker, pol *policy.Policy, q Question) (Answer, string) {
	ans := Answer{How: Unsupported}
	if a != nil {
		actx, cancel := context.WithTimeout(ctx, q.Timeout)
		ans = a.Ask(actx, q)
		cancel()
	}
	what := fmt.Sprintf("%s/%s needs the user's approval (%s)", q.Server, q.Tool, q.Reason)
	switch ans.How {
	case Unsupported:
		why := "this client cannot ask the user (it did not declare MCP elicitation)"
		if ans.Why != "" {
			why = ans.Why
		}
		ans = Answer{Allow: pol.Tools.AskFallback == policy.Allow, How: Fallback}
		return ans, what + ", and " + why + "; the policy's tools.ask_fallback is deny"
	case Accepted, Remembered:
		if ans.Allow {
			return ans, ""
		}
	}
	ans.Allow = false
	switch ans.How {
	case TimedOut:
		return ans, fmt.Sprintf("%s: no answer within %s", what, units.FormatDuration(q.Timeout))
	case Cancelled:
		return ans, what + ": the user dismissed the request"
	case Failed:
		return ans, what + ": the client failed to ask the user"
	case Remembered:
		return ans, what + ": the user declined it earlier in this run"
	case Withheld:
		return ans, what + ": not asked, " + ans.Why
	}
	ans.How = Declined
	return ans, what + ": the user declined it"
}

// SummarizeArguments is args, a JSON object, in at most max bytes for a
// human to read: its top-level keys in order with their values, strings
// quoted and cut, objects and lists as {…} and […] with their sizes. What
// is not a JSON object is shown as its size.
func SummarizeArguments(args json.RawMessage, max int) string {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var m map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) == 0 {
		return "{}"
	}
	if err := dec.Decode(&m); err != nil {
		return fmt.Sprintf("(%s of arguments that are not a JSON object)", units.Bytes(int64(len(args))))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteCut(k, 40))
		b.WriteString(": ")
		b.WriteString(valueSummary(m[k]))
		if b.Len() > max {
			break
		}
	}
	b.WriteByte('}')
	return cut(b.String(), max)
}

// valueSummary is one argument's value, short.
func valueSummary(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "null"
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return `"…"`
		}
		return quoteCut(s, 60)
	case '{':
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return "{…}"
		}
		return fmt.Sprintf("{… %d keys}", len(m))
	case '[':
		var l []json.RawMessage
		if json.Unmarshal(v, &l) != nil {
			return "[…]"
		}
		return fmt.Sprintf("[… %d items]", len(l))
	}
	return cut(string(v), 40)
}

// quoteCut is s quoted (control characters escaped), cut to n runes.
func quoteCut(s string, n int) string {
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	return strconv.Quote(s)
}

// cut is s cut to at most n bytes, on a rune boundary, marked with "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// CallReport is what the proxy says of one call, for the run's trace: how
// the policy decided and, for an ask, how the human answered. A bridge in
// the same process passes one in its [Call]; a remote proxy's answers carry
// the same in MetaDecision.
type CallReport struct {
	// Decision is "allow", "deny", or "ask" when the human was asked (or
	// the fallback applied); "" when the call was refused before the
	// policy's rules were looked at (unknown tool, budget).
	Decision string
	// Asked is how an ask was answered (Accepted, Declined...).
	Asked string
	// Upstream is how long the upstream server's part of the call took,
	// as the proxy measured it: the rest of the call's time is the
	// bridge's own. Zero when the call never reached the server, and
	// from a remote proxy.
	Upstream time.Duration
	// Server and Tool are the call's server and tool once resolved: Server
	// a configured server's name, Tool a name that server lists (allowed
	// by the policy or not). Each stays "" while it is not, as for a name
	// the code made up: only these names go into a span (UnknownName
	// stands for the rest), so that the code cannot write into the traces.
	Server, Tool string
}

// encode is r as MetaDecision says it.
func (r *CallReport) encode() string {
	if r.Asked != "" {
		return r.Decision + ":" + r.Asked
	}
	return r.Decision
}

// decode reads MetaDecision's value into r.
func (r *CallReport) decode(v any) {
	s, _ := v.(string)
	if len(s) > 64 {
		return
	}
	r.Decision, r.Asked, _ = strings.Cut(s, ":")
}
