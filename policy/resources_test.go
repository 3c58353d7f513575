package policy

import (
	"strings"
	"testing"
)

// resources.default, left out, follows tools.default (ask as deny); set,
// it is what the file says.
func TestResourcesDefaultFollowsTools(t *testing.T) {
	for _, c := range []struct {
		src  string
		want Action
	}{
		{"version: 1\n", Allow},
		{"version: 1\ntools:\n  default: deny\n", Deny},
		{"version: 1\ntools:\n  default: ask\n", Deny},
		{"version: 1\ntools:\n  default: deny\nresources:\n  default: allow\n", Allow},
		{"version: 1\nresources:\n  default: deny\n", Deny},
		// The order of the sections does not matter.
		{"version: 1\nresources:\n  max_bytes: 1Mi\ntools:\n  default: deny\n", Deny},
	} {
		p := mustParse(t, c.src)
		if p.Resources.Default != c.want {
			t.Errorf("%q: resources.default = %q, want %q", c.src, p.Resources.Default, c.want)
		}
		if q := mustParse(t, Format(p)); q.Resources.Default != c.want {
			t.Errorf("%q: after Format, resources.default = %q", c.src, q.Resources.Default)
		}
	}
	if d := Default().Resources; d.Default != Allow || d.MaxBytes != 8<<20 || d.Rules != nil {
		t.Errorf("Default().Resources = %+v", d)
	}
}

func TestParseResources(t *testing.T) {
	p := mustParse(t, `version: 1
resources:
  default: deny
  max_bytes: 64Ki
  rules:
    - server: "fs"
      uri: "file:///srv/*"
      action: allow
    - uri: "demo://*"
      action: deny
      reason: "no demos"
`)
	r := p.Resources
	if r.Default != Deny || r.MaxBytes != 64<<10 || len(r.Rules) != 2 {
		t.Fatalf("resources = %+v", r)
	}
	if got := r.Rules[0]; got.Server != "fs" || got.URI != "file:///srv/*" || got.Action != Allow || got.Line != 6 {
		t.Errorf("rule 0 = %+v", got)
	}
	if got := r.Rules[1]; got.Server != "*" || got.URI != "demo://*" || got.Action != Deny || got.Reason != "no demos" {
		t.Errorf("rule 1 = %+v", got)
	}
}

func TestParseResourcesErrors(t *testing.T) {
	for src, want := range map[string]string{
		"resources:\n  default: ask\n":                  `resources.default: "ask" is not one of allow, deny`,
		"resources:\n  max_bytes: 9Mi\n":                "resources.max_bytes: 9Mi is out of range: it must be 1Ki .. 8Mi",
		"resources:\n  max_bytes: 512\n":                "resources.max_bytes: 512 is out of range",
		"resources:\n  rules:\n    - uri: \"x:*\"\n":    "resources.rules[0]: missing action: every rule says allow or deny",
		"resources:\n  rules:\n    - action: ask\n":     `resources.rules[0].action: "ask" is not one of allow, deny`,
		"resources:\n  rules:\n    - tool: a\n":         `unknown key "tool" in resources.rules[0]`,
		"resources:\n  rules:\n    - uri: \"[\"\n":      `resources.rules[0].uri: invalid glob "["`,
		"resources:\n  url: x\n":                        `unknown key "url" in resources`,
		"resources:\n  rules:\n    - uri: \"\"\n":       "resources.rules[0].uri: an empty glob matches nothing",
		"resources:\n  rules: {server: a}\n":            "resources.rules: want a list of rules",
		"resources:\n  rules:\n    - server: 3\n":       "resources.rules[0].server: want a string",
		"resources:\n  rules:\n    - action: allow\n":   "",
		"resources:\n  default: deny\n  rules: []\n":    "",
		"resources:\n  rules:\n    - {action: allow}\n": "",
	} {
		_, err := Parse([]byte("version: 1\n"+src), "f.yaml")
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", src, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want one containing %q", src, err, want)
		}
	}
}

func TestDecideResource(t *testing.T) {
	p := mustParse(t, `version: 1
tools:
  servers: ["fs", "everything"]
resources:
  default: deny
  rules:
    - server: "fs"
      uri: "file:///srv/secret/*"
      action: deny
      reason: "not the secrets"
    - server: "fs"
      uri: "file:///srv/*"
      action: allow
    - server: "everything"
      uri: "demo://resource/static/*"
      action: allow
`)
	for _, c := range []struct {
		server, uri string
		allow       bool
		rule        string
		reason      string
	}{
		{"fs", "file:///srv/data/a.csv", true, "resources.rules[1] (line 11)", ""},
		{"fs", "file:///srv/secret/key", false, "resources.rules[0] (line 7)", "not the secrets"},
		{"fs", "file:///etc/passwd", false, "resources.default", "resources.default is deny"},
		{"everything", "demo://resource/static/document/a.md", true, "resources.rules[2] (line 14)", ""},
		{"everything", "demo://resource/dynamic/text/1", false, "resources.default", "no resources rule matched"},
		{"github", "file:///srv/data/a.csv", false, "tools.servers", `server "github" is not in the policy's tools.servers`},
	} {
		d := p.DecideResource(c.server, c.uri)
		if d.Allow != c.allow || p.ResourceRuleName(d) != c.rule || !strings.Contains(d.Reason, c.reason) || (c.allow && d.Reason != "") {
			t.Errorf("%s %s: %+v (%s), want allow %t by %s, reason %q", c.server, c.uri, d, p.ResourceRuleName(d), c.allow, c.rule, c.reason)
		}
	}
	for server, open := range map[string]bool{"fs": true, "everything": true, "github": false, "memory": false} {
		if p.ResourcesOpen(server) != open {
			t.Errorf("ResourcesOpen(%q) = %t", server, !open)
		}
	}
	// A default allow opens every reached server; a nil policy everything.
	q := mustParse(t, "version: 1\ntools:\n  servers: [\"fs\"]\n")
	if !q.ResourcesOpen("fs") || q.ResourcesOpen("other") || !q.DecideResource("fs", "x:y").Allow {
		t.Error("a default policy should open the resources of the servers it reaches")
	}
	// A server whose results are tokenized keeps its resources.
	tk := mustParse(t, "version: 1\ntokenize:\n  results:\n    - {server: \"crm\"}\n")
	if d := tk.DecideResource("crm", "crm://x"); d.Allow || tk.ResourceRuleName(d) != "tokenize.results" || tk.ResourcesOpen("crm") || !tk.ResourcesOpen("fs") {
		t.Errorf("tokenized server: %+v", d)
	}
	var none *Policy
	if !none.ResourcesOpen("any") || !none.DecideResource("any", "x:y").Allow {
		t.Error("a nil policy allows everything")
	}
}

func TestNormalizeURI(t *testing.T) {
	for in, want := range map[string]string{
		"file:///srv/a.txt":                    "file:///srv/a.txt",
		"FILE:///srv/a.txt":                    "file:///srv/a.txt",
		"File:///srv/%73ecret/%7euser":         "file:///srv/secret/~user",
		"demo://resource/static/document/a.md": "demo://resource/static/document/a.md",
		"x:a%2fb%20c":                          "x:a%2Fb%20c",
		"urn:isbn:0451450523":                  "urn:isbn:0451450523",
		"s3+x.y-z://b/k?q=1#f":                 "s3+x.y-z://b/k?q=1#f",
		"x:%":                                  "x:%",
		"x:a..b/c.d/.e":                        "x:a..b/c.d/.e",
		"x:/a?q=../b":                          "x:/a?q=../b",
	} {
		got, err := NormalizeURI(in)
		if err != nil || got != want {
			t.Errorf("NormalizeURI(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                                      "empty",
		"/etc/passwd":                           "needs a scheme",
		"1x:y":                                  "needs a scheme",
		"noscheme":                              "needs a scheme",
		"file:///a b":                           "space or control",
		"file:///a\nb":                          "space or control",
		"file:///srv/../etc/passwd":             `".." segment`,
		"file:///srv/%2e%2E/etc":                `".." segment`,
		"file:///srv%2F..%2Fetc":                `".." segment`,
		`file:///srv\..\etc`:                    `".." segment`,
		"file:///srv/./a":                       `".." segment`,
		"x:" + strings.Repeat("a", MaxURIBytes): "at most 4096",
	} {
		if got, err := NormalizeURI(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NormalizeURI(%q) = %q, %v; want an error with %q", in, got, err, want)
		}
	}
	// A glob on the normal form holds for every way of writing the URI.
	p := mustParse(t, "version: 1\nresources:\n  rules:\n    - {uri: \"file:///srv/secret/*\", action: deny}\n")
	for _, uri := range []string{"FILE:///srv/secret/k", "file:///srv/%73ecret/k", "file:///srv/secre%74/k"} {
		n, err := NormalizeURI(uri)
		if err != nil || p.DecideResource("fs", n).Allow {
			t.Errorf("%s (%s, %v) escaped the deny rule", uri, n, err)
		}
	}
}

// A resource read is audited as resource_read, with its URI and no tool; a
// listing as resource_list.
func TestAuditResourceRecords(t *testing.T) {
	s, _, records := auditStore(t, "version: 1\n")
	r := s.Begin("r1")
	s.Record(r, Call{RunID: "r1", Server: "fs", Tool: ResourcesRead, URI: "file:///srv/a.csv", Allowed: true, Rule: "resources.default", ResultBytes: 42})
	s.Record(r, Call{RunID: "r1", Server: "fs", Tool: ResourcesList, Allowed: true, Rule: "resources.default", ResultBytes: 7})
	s.End("r1")
	recs := records()
	if len(recs) != 2 {
		t.Fatalf("records = %v", recs)
	}
	read, list := recs[0], recs[1]
	if read["event"] != "resource_read" || read["uri"] != "file:///srv/a.csv" || read["server"] != "fs" || read["result_bytes"] != 42.0 || read["tool"] != nil {
		t.Errorf("read record = %v", read)
	}
	if list["event"] != "resource_list" || list["uri"] != nil || list["tool"] != nil || list["decision"] != "allow" {
		t.Errorf("list record = %v", list)
	}
}
