package policy

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Resources says which resources of the upstream servers the code may list
// and read (mcp_tools.resources and read_resource, and run inputs by URI),
// and how much of one it may read. A server that Tools.Servers does not
// reach has no resources either.
type Resources struct {
	// Default is what a read no rule matches gets: Allow or Deny. A file
	// that does not set it gets tools.default's action, an ask counting as
	// a deny (reads are not asked about): a policy that denies tools by
	// default denies resources too.
	Default Action
	// Rules are tried in order; the first that matches decides.
	Rules []ResourceRule
	// MaxBytes bounds one read: the contents of a resource, as bytes
	// (text in UTF-8, blobs decoded). A larger one is refused. 8Mi
	// (1Ki .. 8Mi).
	MaxBytes int64
}

// ResourceRule matches resources by server name and URI globs.
type ResourceRule struct {
	Server string // glob; default "*"
	// URI is a glob of the resource's URI, normalized as [NormalizeURI]
	// does (its scheme in lower case); "*" and "?" match "/" too, so
	// "file:///data/*" matches everything under /data. Default "*".
	URI    string
	Action Action // Allow or Deny
	// Reason, if set, is shown to the code when the rule denies a read.
	Reason string

	Line, Column int
}

// Bounds of the resources section's values.
const (
	minResourceBytes = 1 << 10
	maxResourceBytes = 8 << 20
	// MaxURIBytes is the longest resource URI the bridge passes on.
	MaxURIBytes = 4096
)

// Names of the resource operations in audit records (Call.Tool) and
// decisions: a resource read or listing is recorded as a call of its
// server's "tool" of this name.
const (
	ResourcesRead = "resources/read"
	ResourcesList = "resources/list"
)

var resourcesKeys = []string{"default", "rules", "max_bytes"}
var resourceRuleKeys = []string{"server", "uri", "action", "reason"}

func defaultResources() Resources {
	return Resources{Default: Allow, MaxBytes: maxResourceBytes}
}

// resourcesDefault is the resources.default of a policy that does not set
// it: tools.default's action, ask counting as deny.
func resourcesDefault(tools Action) Action {
	if tools == Allow || tools == "" {
		return Allow
	}
	return Deny
}

func (p *parser) resources(k, v *yaml.Node, r *Resources) {
	p.keys(k, v, "resources", resourcesKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "default":
			if a, ok := p.enum(k, v, name, []string{"allow", "deny"}); ok {
				r.Default = Action(a)
			}
		case "max_bytes":
			r.MaxBytes = p.size(k, v, name, r.MaxBytes, minResourceBytes, maxResourceBytes)
		case "rules":
			p.items(k, v, name, "a list of rules", func(item *yaml.Node, name string) {
				if rr, ok := p.resourceRule(item, name); ok {
					r.Rules = append(r.Rules, rr)
				}
			})
		}
	})
}

func (p *parser) resourceRule(n *yaml.Node, name string) (ResourceRule, bool) {
	r := ResourceRule{Server: "*", URI: "*", Line: n.Line, Column: n.Column}
	seen, ok := p.entry(n, name, "a rule (a mapping with action and optionally server, uri, reason)", resourceRuleKeys, func(key, kname string, k, v *yaml.Node) {
		switch key {
		case "server":
			r.Server, _ = p.glob(k, v, kname)
		case "uri":
			r.URI, _ = p.glob(k, v, kname)
		case "action":
			if a, ok := p.enum(k, v, kname, []string{"allow", "deny"}); ok {
				r.Action = Action(a)
			}
		case "reason":
			r.Reason, _ = p.str(k, v, kname)
		}
	})
	if !ok {
		return r, false
	}
	if seen["action"] == nil {
		p.errorf(n, "%s: missing action: every rule says allow or deny", name)
	}
	return r, true
}

// NormalizeURI checks a resource URI the code asked for and returns the
// form the policy decides on and the upstream is sent: the scheme in lower
// case, and percent-escapes of unreserved characters (letters, digits,
// "-._~") decoded, as RFC 3986 says they are equal; so "FILE:///s%65cret"
// is "file:///secret" to a rule's glob as to the server. A URI with no
// scheme, with spaces or control characters, over [MaxURIBytes], or whose
// path holds "." or ".." segments (also percent-encoded, or after "\") is
// refused: a glob on the URI as written must not be escaped by one that
// the server resolves elsewhere.
func NormalizeURI(uri string) (string, error) {
	switch {
	case uri == "":
		return "", fmt.Errorf("the resource URI is empty")
	case len(uri) > MaxURIBytes:
		return "", fmt.Errorf("the resource URI is %d bytes; at most %d are passed on", len(uri), MaxURIBytes)
	case strings.IndexFunc(uri, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0:
		return "", fmt.Errorf("the resource URI %s holds a space or control character: percent-encode it", clipURI(uri))
	}
	colon := strings.IndexByte(uri, ':')
	if colon <= 0 || !validScheme(uri[:colon]) {
		return "", fmt.Errorf("%s is not a URI: it needs a scheme, as in file:///path or demo://resource/1", clipURI(uri))
	}
	var b strings.Builder
	b.WriteString(strings.ToLower(uri[:colon]))
	rest := uri[colon:]
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c == '%' && i+2 < len(rest) && isHex(rest[i+1]) && isHex(rest[i+2]) {
			d := unhex(rest[i+1])<<4 | unhex(rest[i+2])
			if unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteString(strings.ToUpper(rest[i : i+3]))
			}
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	norm := b.String()
	if dotSegment(norm) {
		return "", fmt.Errorf("the resource URI %s has a \".\" or \"..\" segment: give the resource's own URI, as mcp_tools.resources() lists it", clipURI(uri))
	}
	return norm, nil
}

// dotSegment reports whether uri's path, fully percent-decoded, has a "."
// or ".." segment between "/" or "\" (a server may decode "%2F" or take
// "\" for "/").
func dotSegment(uri string) bool {
	dec, err := url.PathUnescape(uri)
	if err != nil {
		dec = uri
	}
	if i := strings.IndexAny(dec, "?#"); i >= 0 {
		dec = dec[:i]
	}
	for _, seg := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// clipURI quotes uri for a message, cut to 200 bytes.
func clipURI(uri string) string {
	if len(uri) > 200 {
		return strconv.Quote(uri[:200]) + "..."
	}
	return strconv.Quote(uri)
}

// DecideResource says whether the code may read the resource uri (as
// [NormalizeURI] returns it) of server: Tools.Servers first (no glob
// matches: deny, RuleServers), then Tokenize.Results (a server some of
// whose results are tokenized: deny, RuleTokenized), then Resources.Rules in order, the first
// that matches deciding, then Resources.Default. Decision.Rule indexes
// Resources.Rules; ResourceRuleName names it. A nil *[Policy] allows
// everything.
func (p *Policy) DecideResource(server, uri string) Decision {
	if !p.ServerAllowed(server) {
		return Decision{Rule: RuleServers, Reason: fmt.Sprintf("server %q is not in the policy's tools.servers", server)}
	}
	if p == nil {
		return Decision{Allow: true, Rule: RuleDefault}
	}
	if p.resourcesTokenized(server) {
		return Decision{Rule: RuleTokenized, Reason: fmt.Sprintf("the policy tokenizes results of server %q (tokenize.results), "+
			"and a resource's contents would reach the code untokenized: call its tools instead", server)}
	}
	for i := range p.Resources.Rules {
		r := &p.Resources.Rules[i]
		if glob(r.Server, server) && glob(r.URI, uri) {
			return p.resourceDecision(r.Action, i, r.Reason, server, uri)
		}
	}
	return p.resourceDecision(p.Resources.Default, RuleDefault, "", server, uri)
}

func (p *Policy) resourceDecision(a Action, rule int, reason, server, uri string) Decision {
	d := Decision{Allow: a == Allow || (a == "" && rule == RuleDefault), Rule: rule}
	switch {
	case d.Allow:
	case reason != "":
		d.Reason = reason
	case rule == RuleDefault:
		d.Reason = fmt.Sprintf("denied by policy: no resources rule matched server %q, URI %s, and resources.default is deny", server, clipURI(uri))
	default:
		d.Reason = fmt.Sprintf("denied by policy rule %s: server %q, URI %s", p.ResourceRuleName(d), server, clipURI(uri))
	}
	return d
}

// RuleTokenized is the [Decision.Rule] of a resource refused because the
// policy tokenizes its server's results.
const RuleTokenized = -3

// resourcesTokenized says whether tokenize.results names some tool of
// server: its resources are refused, as their contents (blobs among them)
// are not tokenized.
func (p *Policy) resourcesTokenized(server string) bool {
	for _, m := range p.Tokenize.Results {
		if glob(m.Server, server) {
			return true
		}
	}
	return false
}

// ResourcesOpen reports whether some resource of server may be read: the
// server is reached and resources.default allows, or a rule whose server
// glob matches it does. A server that is not open is left out of listings.
func (p *Policy) ResourcesOpen(server string) bool {
	if !p.ServerAllowed(server) || (p != nil && p.resourcesTokenized(server)) {
		return false
	}
	if p == nil || p.Resources.Default != Deny {
		return true
	}
	for i := range p.Resources.Rules {
		if r := &p.Resources.Rules[i]; r.Action == Allow && glob(r.Server, server) {
			return true
		}
	}
	return false
}

// ResourceRuleName names the part of the policy that made d, a decision of
// DecideResource: "resources.rules[1] (line 20)", "resources.default" or
// "tools.servers".
func (p *Policy) ResourceRuleName(d Decision) string {
	switch d.Rule {
	case RuleDefault:
		return "resources.default"
	case RuleServers:
		return "tools.servers"
	case RuleTokenized:
		return "tokenize.results"
	}
	name := "resources.rules[" + strconv.Itoa(d.Rule) + "]"
	if p != nil && d.Rule >= 0 && d.Rule < len(p.Resources.Rules) {
		if line := p.Resources.Rules[d.Rule].Line; line > 0 {
			name += " (line " + strconv.Itoa(line) + ")"
		}
	}
	return name
}
