package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// normalized is p without what a round trip through Format changes: Source,
// the file's hash and the rules' and rates' positions.
func normalized(p *Policy) *Policy {
	q := *p
	q.Source, q.sum = "", [32]byte{}
	q.Tools.Rules = append([]Rule(nil), p.Tools.Rules...)
	for i := range q.Tools.Rules {
		q.Tools.Rules[i].Line, q.Tools.Rules[i].Column = 0, 0
	}
	q.Resources.Rules = append([]ResourceRule(nil), p.Resources.Rules...)
	for i := range q.Resources.Rules {
		q.Resources.Rules[i].Line, q.Resources.Rules[i].Column = 0, 0
	}
	q.Budgets.Rates = append([]Rate(nil), p.Budgets.Rates...)
	for i := range q.Budgets.Rates {
		q.Budgets.Rates[i].Line, q.Budgets.Rates[i].Column = 0, 0
	}
	q.Mounts = append([]Mount(nil), p.Mounts...)
	for i := range q.Mounts {
		q.Mounts[i].Line, q.Mounts[i].Column = 0, 0
	}
	q.Tokenize.Patterns = append([]TokenPattern(nil), p.Tokenize.Patterns...)
	for i := range q.Tokenize.Patterns {
		q.Tokenize.Patterns[i].Line, q.Tokenize.Patterns[i].Column = 0, 0
	}
	for _, l := range []*[]ToolMatch{&q.Tokenize.Results, &q.Tokenize.Restore} {
		*l = append([]ToolMatch(nil), *l...)
		for i := range *l {
			(*l)[i].Line, (*l)[i].Column = 0, 0
		}
	}
	return &q
}

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src), "t.yaml")
	if err != nil {
		t.Fatalf("Parse:\n%s\nerror:\n%v", src, err)
	}
	return p
}

func TestDefault(t *testing.T) {
	d := Default()
	if d.Source != "" || d.Sandbox.Engine != "auto" || d.Sandbox.OCIRuntime != "default" || d.Sandbox.Timeout != time.Minute || d.Sandbox.MaxTimeout != 5*time.Minute ||
		d.Sandbox.Memory != 512<<20 || d.Sandbox.CPUs != 1 || d.Sandbox.Pids != 128 || d.Sandbox.TmpfsSize != 64<<20 ||
		d.Sandbox.OutputLimit != 64<<10 || d.Sandbox.MaxConcurrent != 4 || d.Sandbox.Queue != 16 || !d.Sandbox.RequireEnforcedLimits ||
		!reflect.DeepEqual(d.Tools.Servers, []string{"*"}) || d.Tools.Default != Allow || d.Tools.Rules != nil ||
		d.Budgets.MaxCallsPerRun != 1000 || d.Budgets.MaxArgumentBytes != 1<<20 || d.Budgets.MaxResultBytes != 8<<20 ||
		d.Budgets.CallTimeout != time.Minute || d.Budgets.Rates != nil || d.Audit.File != "" {
		t.Fatalf("Default() = %+v", d)
	}
	d.Tools.Servers[0] = "changed"
	if Default().Tools.Servers[0] != "*" {
		t.Fatal("Default() shares its Servers slice")
	}
}

// Missing keys and empty sections take the defaults.
func TestDefaultsFilledIn(t *testing.T) {
	for _, src := range []string{
		"version: 1\n",
		"version: 1\nsandbox:\ntools:\nbudgets:\naudit:\n",
		"version: 1\nsandbox: {}\ntools: {}\nbudgets: {}\naudit: {}\n",
		"# comment\nversion: 1 # here\ntools:\n  rules:\n  # - action: deny\nbudgets:\n  rates:\n",
		"version: 1\ntools:\n  rules: []\nbudgets:\n  rates: []\n",
		"---\nversion: 1\n...\n",
		"\ufeffversion: 1\n",
	} {
		p := mustParse(t, src)
		want := Default()
		want.Source = "t.yaml"
		if !reflect.DeepEqual(p, want) {
			t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", src, p, want)
		}
	}
}

// The example file sets every key to its default: it and Default() agree.
func TestExampleFileIsTheDefault(t *testing.T) {
	p, err := Load("../policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "../policy.example.yaml" {
		t.Errorf("Source = %q", p.Source)
	}
	if got, want := normalized(p), normalized(Default()); !reflect.DeepEqual(got, want) {
		t.Errorf("policy.example.yaml =\n%s\nDefault() =\n%s", Format(got), Format(want))
	}
	// The file sets every key explicitly (no key left to the defaults).
	data, _ := os.ReadFile("../policy.example.yaml")
	for _, keys := range [][]string{topKeys, sandboxKeys, snapshotsKeys, artifactsKeys, inputsKeys, toolsKeys, resourcesKeys, budgetsKeys, auditKeys, httpKeys} {
		for _, k := range keys {
			if !regexp.MustCompile(`(?m)^ *` + k + `:`).Match(data) {
				t.Errorf("policy.example.yaml does not set %s", k)
			}
		}
	}
}

// The example rules and rates, commented out in the example file, are valid.
func TestExampleFileCommentedRules(t *testing.T) {
	data, err := os.ReadFile("../policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := regexp.MustCompile(`(?m)^(    )# ((?:- |  )[a-zA-Z].*)$`).ReplaceAllString(string(data), "$1$2")
	p := mustParse(t, src)
	if len(p.Tools.Rules) != 5 || len(p.Budgets.Rates) != 1 {
		t.Fatalf("uncommented example: %d rules, %d rates; want 5 and 1:\n%s", len(p.Tools.Rules), len(p.Budgets.Rates), Format(p))
	}
	tr, fa := true, false
	want := []Rule{
		{Server: "github", Tool: "delete_*", Action: Deny, Reason: "deleting on GitHub needs a human"},
		{Server: "*", Tool: "*", Annotations: Annotations{DestructiveHint: &tr, ReadOnlyHint: &fa}, Action: Deny, Reason: "destructive tools are off in this sandbox"},
		{Server: "*", Tool: "*", Annotations: Annotations{ReadOnlyHint: &tr}, Action: Allow},
		{Server: "*", Tool: "*", Action: Deny, Reason: "only read-only tools may be called"},
		{Server: "payments", Tool: "*", Action: Ask, Reason: "payments move money"},
	}
	if got := normalized(p).Tools.Rules; !reflect.DeepEqual(got, want) {
		t.Errorf("rules = %+v\nwant %+v", got, want)
	}
	if got := normalized(p).Resources.Rules; len(got) != 1 || got[0] != (ResourceRule{Server: "filesystem", URI: "file:///home/*/.ssh/*", Action: Deny, Reason: "keys stay on the host"}) {
		t.Errorf("resources rules = %+v", got)
	}
	if r := p.Budgets.Rates[0]; r.Server != "github" || r.Tool != "*" || r.Per != "tool" || r.PerSecond != 1 || r.Burst != 10 {
		t.Errorf("rate = %+v", r)
	}
}

func TestParseEverything(t *testing.T) {
	src := `version: 1
sandbox:
  engine: podman
  oci_runtime: runsc
  image: "localhost/runner:dev"
  timeout: 1m30s
  max_timeout: 1h
  memory: 1Gi
  cpus: 0.5
  pids: 64
  tmpfs_size: 16M
  output_limit: 1048576
  max_concurrent: 2
  queue: 0
  require_enforced_limits: false
pool: {size: 5, max: 12,
  shrink_after: 30s,
  max_age: 2h}
artifacts:
  max_files: 0
  max_bytes_inline: 8Mi
  max_bytes_total: 12Mi
  dir: /var/tmp/bridge-artifacts
  by_reference: all
  max_bytes_stored: 64Gi
  max_bytes_kept: 64Gi
  expiry: 720h
tools:
  servers: ["github", "fs-*"]
  default: deny
  rules:
    - server: github
      tool: "delete_*"
      action: deny
      reason: no deleting
    -   annotations:
          readOnlyHint: true
          destructiveHint: false
          idempotentHint: true
          openWorldHint: false
        action: allow
budgets:
  max_calls_per_run: 0
  max_argument_bytes: 4Mi
  max_result_bytes: 1
  call_timeout: 500ms
  rates:
    - rate: 10/s
    - server: "github"
      tool: "search_*"
      per: server
      rate: 90/m
      burst: 3
    - rate: 0.5/s
    - rate: 3600/h
audit:
  file: /var/log/bridge/audit.jsonl
sessions:
  enabled: true
  max: 8
  idle_timeout: 30s
  max_lifetime: 2h
  max_calls: 50
skills:
  dir: /var/tmp/bridge-skills
  save: false
  max_count: 7
  max_bytes: 2Ki
tokenize:
  kinds: [card, email]
  patterns:
    - {name: customer_id, regex: "CUST-[0-9]{6}"}
  results:
    - {server: crm}
  restore:
    - server: mail*
      tool: send
  max_values: 50
http:
  max_sessions: 50
  max_sessions_per_client: 5
  session_idle_timeout: 2m
  session_min_idle: 10s
inputs: {max_files: 0, max_file_bytes: 1Gi, max_bytes: 16Gi}
snapshots:
  enabled: false
  dir: /var/tmp/bridge-snapshots
  max_count: 3
  max_bytes: 10Mi
  ttl: 36h
tasks:
  enabled: false
  after: 100ms
  max: 100
  max_per_principal: 3
  result_ttl: 1h
  max_result_bytes: 8Mi
`
	src = strings.Replace(src, "budgets:\n", "  ask_fallback: allow\n  ask_timeout: 30s\n  ask_remember: connection\n  ask_max_per_run: 3\nbudgets:\n", 1)
	p := mustParse(t, src)
	tr, fa := true, false
	want := &Policy{
		Source: "t.yaml",
		Sandbox: Sandbox{Engine: "podman", OCIRuntime: "runsc", Image: "localhost/runner:dev", Variant: "slim", Timeout: 90 * time.Second, MaxTimeout: time.Hour,
			Memory: 1 << 30, CPUs: 0.5, Pids: 64, TmpfsSize: 16e6, OutputLimit: 1 << 20, MaxConcurrent: 2, Queue: 0, MaxCodeBytes: 1 << 20, MaxRequestBytes: 4 << 20},
		Pool:     Pool{Size: 5, Max: 12, ShrinkAfter: 30 * time.Second, MaxAge: 2 * time.Hour},
		Sessions: Sessions{Enabled: true, Max: 8, IdleTimeout: 30 * time.Second, MaxLifetime: 2 * time.Hour, MaxCalls: 50},
		Skills:   Skills{Dir: artifactsDir(t, "/var/tmp/bridge-skills"), Save: false, MaxCount: 7, MaxBytes: 2 << 10},
		Artifacts: Artifacts{MaxFiles: 0, MaxBytesInline: 8 << 20, MaxBytesTotal: 12 << 20, Dir: artifactsDir(t, "/var/tmp/bridge-artifacts"), ByReference: "all",
			MaxBytesStored: 64 << 30, MaxBytesKept: 64 << 30, MaxBytesRead: 8 << 20, Expiry: 720 * time.Hour},
		Inputs: Inputs{MaxFiles: 0, MaxFileBytes: 1 << 30, MaxBytes: 16 << 30},
		Tools: Tools{Servers: []string{"github", "fs-*"}, Default: Deny, Rules: []Rule{
			{Server: "github", Tool: "delete_*", Action: Deny, Reason: "no deleting", Line: 32, Column: 7},
			{Server: "*", Tool: "*", Annotations: Annotations{ReadOnlyHint: &tr, DestructiveHint: &fa, IdempotentHint: &tr, OpenWorldHint: &fa},
				Action: Allow, Line: 36, Column: 9},
		}, AskFallback: Allow, AskTimeout: 30 * time.Second, AskRemember: RememberConnection, AskMaxPerRun: 3, OnChange: Deny},
		// Not set: tools.default's deny.
		Resources: Resources{Default: Deny, MaxBytes: 8 << 20},
		Budgets: Budgets{MaxCallsPerRun: 0, MaxArgumentBytes: 4 << 20, MaxResultBytes: 1, CallTimeout: 500 * time.Millisecond, Rates: []Rate{
			{Server: "*", Tool: "*", Per: "tool", PerSecond: 10, Burst: 10, Line: 52, Column: 7},
			{Server: "github", Tool: "search_*", Per: "server", PerSecond: 1.5, Burst: 3, Line: 53, Column: 7},
			{Server: "*", Tool: "*", Per: "tool", PerSecond: 0.5, Burst: 1, Line: 58, Column: 7},
			{Server: "*", Tool: "*", Per: "tool", PerSecond: 1, Burst: 1, Line: 59, Column: 7},
		}},
		Tokenize: Tokenize{Kinds: []string{"card", "email"}, MaxValues: 50,
			Patterns: []TokenPattern{{Name: "customer_id", Regex: "CUST-[0-9]{6}", Line: 76, Column: 7}},
			Results:  []ToolMatch{{Server: "crm", Tool: "*", Line: 78, Column: 7}},
			Restore:  []ToolMatch{{Server: "mail*", Tool: "send", Line: 80, Column: 7}}},
		Audit: Audit{File: "/var/log/bridge/audit.jsonl"},
		HTTP:  HTTP{MaxSessions: 50, MaxSessionsPerClient: 5, SessionIdleTimeout: 2 * time.Minute, SessionMinIdle: 10 * time.Second},

		Snapshots: Snapshots{Enabled: false, Dir: artifactsDir(t, "/var/tmp/bridge-snapshots"), MaxCount: 3, MaxBytes: 10 << 20, TTL: 36 * time.Hour},
		Tasks:     Tasks{Enabled: false, After: 100 * time.Millisecond, Max: 100, MaxPerPrincipal: 3, ResultTTL: time.Hour, MaxResultBytes: 8 << 20},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got\n%+v\nwant\n%+v", p, want)
	}
	if got := normalized(mustParse(t, Format(p))); !reflect.DeepEqual(got, normalized(p)) {
		t.Errorf("round trip:\n%s", Format(p))
	}
}

func TestBurstDefault(t *testing.T) {
	for rate, burst := range map[string]int{"10/s": 10, "0.5/s": 1, "2.5/s": 3, "1/h": 1, "600/m": 10, "601/m": 11, "1000000000/s": 1000000000} {
		p := mustParse(t, "version: 1\nbudgets:\n  rates:\n    - rate: "+rate+"\n")
		if got := p.Budgets.Rates[0].Burst; got != burst {
			t.Errorf("rate %s: burst %d, want %d", rate, got, burst)
		}
	}
}

func TestAuditFileRelativeToPolicy(t *testing.T) {
	for _, c := range []struct{ source, file, want string }{
		{"/etc/bridge/policy.yaml", "audit.jsonl", "/etc/bridge/audit.jsonl"},
		{"/etc/bridge/policy.yaml", "../log/a.jsonl", "/etc/log/a.jsonl"},
		{"/etc/bridge/policy.yaml", "/var/log/a.jsonl", "/var/log/a.jsonl"},
		{"/etc/bridge/policy.yaml", "stderr", "stderr"},
		{"/etc/bridge/policy.yaml", "", ""},
		{"conf/policy.yaml", "a.jsonl", "conf/a.jsonl"},
		{"policy.yaml", "a.jsonl", "a.jsonl"},
		{"", "a.jsonl", "a.jsonl"},
	} {
		p, err := Parse([]byte("version: 1\naudit:\n  file: \""+c.file+"\"\n"), c.source)
		if err != nil {
			t.Fatal(err)
		}
		if p.Audit.File != c.want {
			t.Errorf("source %q, file %q: got %q, want %q", c.source, c.file, p.Audit.File, c.want)
		}
	}
}

// TestParseErrors checks each class of error: its line, column and message.
func TestParseErrors(t *testing.T) {
	big := "version: 1\n" + strings.Repeat("# padding\n", MaxFileSize/10)
	cases := []struct {
		name, src string
		want      []string // "line:col: message", one per problem, in order
	}{
		// The file as a whole.
		{"empty", "", []string{"1:1: missing version: the file must start with \"version: 1\""}},
		{"comments only", "# nothing\n", []string{"1:1: missing version"}},
		{"no version", "sandbox:\n  cpus: 2\n", []string{"1:1: missing version"}},
		{"version 2", "version: 2\n", []string{"1:10: version 2 is not supported: this bridge reads version 1"}},
		{"version string", "version: \"1\"\n", []string{`1:10: version: want the number 1, got a string "1"`}},
		{"version float", "version: 1.0\n", []string{"1:10: version: want the number 1, got a number 1.0"}},
		{"version null", "version:\n", []string{"1:1: version: want the number 1, got null (no value); remove the key to use the default"}},
		{"top level list", "- version: 1\n", []string{"1:1: the top level must be a mapping of keys (version, sandbox, pool, sessions, snapshots, tasks, skills, mounts, artifacts, inputs, tools, resources, budgets, tokenize, audit, http), got a list"}},
		{"top level scalar", "hello\n", []string{`1:1: the top level must be a mapping of keys (version, sandbox, pool, sessions, snapshots, tasks, skills, mounts, artifacts, inputs, tools, resources, budgets, tokenize, audit, http), got a string "hello"`}},
		// The bounds of what a client sends.
		{"code over request", "version: 1\nsandbox:\n  max_code_bytes: 8Mi\n", []string{"3:19: sandbox.max_code_bytes (8Mi) is more than sandbox.max_request_bytes (4Mi)"}},
		{"request under code", "version: 1\nsandbox:\n  max_request_bytes: 512Ki\n", []string{"3:22: sandbox.max_code_bytes (1Mi) is more than sandbox.max_request_bytes (512Ki)"}},
		{"request too small", "version: 1\nsandbox:\n  max_request_bytes: 1Ki\n", []string{"3:22: sandbox.max_request_bytes: 1Ki is out of range"}},
		// The pool's and the sessions' bounds.
		{"pool max_age too short", "version: 1\npool:\n  max_age: 30s\n", []string{"3:12: pool.max_age: 30s is out of range: it must be 60s .. 24h"}},
		{"pool size too big", "version: 1\npool:\n  size: 33\n", []string{"3:9: pool.size: 33 is out of range"}},
		{"pool max too big", "version: 1\npool:\n  max: 33\n", []string{"3:8: pool.max: 33 is out of range"}},
		{"pool max below size", "version: 1\npool:\n  size: 6\n  max: 4\n", []string{"4:8: pool.max: 4 is less than pool.size (6): max is the most ready containers the pool grows to under load, at least its size"}},
		{"pool shrink_after too short", "version: 1\npool:\n  shrink_after: 500ms\n", []string{"3:17: pool.shrink_after: 500ms is out of range"}},
		{"sessions idle too short", "version: 1\nsessions:\n  idle_timeout: 1s\n", []string{"3:17: sessions.idle_timeout: 1s is out of range: it must be 10s .. 24h"}},
		{"sessions lifetime too long", "version: 1\nsessions:\n  max_lifetime: 200h\n", []string{"3:17: sessions.max_lifetime: 200h is out of range: it must be 60s .. 168h"}},
		{"sessions lifetime no unit", "version: 1\nsessions:\n  max_lifetime: 60\n", []string{"3:17: sessions.max_lifetime: want a duration such as 30s, 5m or 1h30m, got a number 60"}},
		{"sessions max zero", "version: 1\nsessions:\n  max: 0\n", []string{"3:8: sessions.max: 0 is out of range"}},
		{"http per client over max", "version: 1\nhttp:\n  max_sessions: 10\n  max_sessions_per_client: 20\n", []string{"4:28: http.max_sessions_per_client: 20 is more than http.max_sessions (10)"}},
		{"http min idle over timeout", "version: 1\nhttp:\n  session_idle_timeout: 30s\n  session_min_idle: 1m\n", []string{"4:21: http.session_min_idle: 60s is longer than http.session_idle_timeout (30s)"}},
		{"http max zero", "version: 1\nhttp:\n  max_sessions: 0\n", []string{"3:17: http.max_sessions: 0 is out of range"}},
		{"http idle too short", "version: 1\nhttp:\n  session_idle_timeout: 1s\n", []string{"3:25: http.session_idle_timeout: 1s is out of range: it must be 10s .. 24h"}},
		{"skills dir relative", "version: 1\nskills:\n  dir: skills\n", []string{`3:8: skills.dir: "skills" is a relative path: give an absolute path, or one starting with ~/`}},
		{"skills dir forbidden", "version: 1\nskills:\n  dir: /var/lib/docker/skills\n", []string{"3:8: skills.dir: /var/lib/docker/skills is inside /var/lib/docker, Docker's storage"}},
		{"skills max_bytes too big", "version: 1\nskills:\n  max_bytes: 2Mi\n", []string{"3:14: skills.max_bytes: 2Mi is out of range"}},
		{"skills max_count zero", "version: 1\nskills:\n  max_count: 0\n", []string{"3:14: skills.max_count: 0 is out of range"}},
		{"skills save and read_only", "version: 1\nskills:\n  save: true\n  read_only: true\n", []string{"4:14: skills.save is true but skills.read_only is true"}},
		{"skills unknown key", "version: 1\nskills:\n  folder: /x\n", []string{`3:3: unknown key "folder" in skills`}},
		{"sessions enabled string", "version: 1\nsessions:\n  enabled: yes please\n", []string{"3:12: sessions.enabled"}},
		{"snapshots dir relative", "version: 1\nsnapshots:\n  dir: snaps\n", []string{`3:8: snapshots.dir: "snaps" is a relative path: give an absolute path, or one starting with ~/`}},
		{"snapshots dir forbidden", "version: 1\nsnapshots:\n  dir: /proc/x\n", []string{"3:8: snapshots.dir: /proc/x is inside /proc"}},
		{"snapshots max_count zero", "version: 1\nsnapshots:\n  max_count: 0\n", []string{"3:14: snapshots.max_count: 0 is out of range: it must be 1 .. 1000"}},
		{"snapshots max_bytes too small", "version: 1\nsnapshots:\n  max_bytes: 1Ki\n", []string{"3:14: snapshots.max_bytes: 1Ki is out of range: it must be 1Mi .. 1Ti"}},
		{"snapshots ttl no unit", "version: 1\nsnapshots:\n  ttl: 7\n", []string{"3:8: snapshots.ttl: want a duration such as 30s, 5m or 1h30m, got a number 7"}},
		{"snapshots ttl too long", "version: 1\nsnapshots:\n  ttl: 9000h\n", []string{"3:8: snapshots.ttl: 9000h is out of range: it must be 60s .. 8760h"}},
		{"snapshots enabled string", "version: 1\nsnapshots:\n  enabled: sure\n", []string{"3:12: snapshots.enabled"}},
		{"snapshots unknown key", "version: 1\nsnapshots:\n  expiry: 1h\n", []string{`3:3: unknown key "expiry" in snapshots`}},
		{"snapshots a list", "version: 1\nsnapshots: [1]\n", []string{"2:12: snapshots"}},
		{"two documents", "version: 1\n---\nversion: 1\n", []string{"3:1: a second YAML document (after ---): a policy file holds one document"}},
		{"too large", big, []string{fmt.Sprintf("1:1: the file is %d bytes; a policy file may have at most 1048576 (1 MiB)", len(big))}},
		{"unclosed list", "version: 1\nsandbox:\n  cpus: [1\n", []string{"3: invalid YAML: did not find expected ',' or ']'"}},
		{"unclosed list on line 1", "version: [1\n", []string{"1: invalid YAML: did not find expected ',' or ']'"}},
		{"bare star glob", "version: 1\ntools:\n  rules:\n    - tool: *_file # not \"*\"\n      action: deny\n", []string{`4:13: invalid YAML: an unquoted *_file (a bare * starts a YAML alias): quote globs, e.g. "*_file"`}},
		{"bare star after a quoted one", "version: 1\ntools:\n  rules:\n    - {server: \"*\", tool: *}\n", []string{`4:27: invalid YAML: an unquoted * (a bare * starts a YAML alias): quote globs, e.g. "*"`}},
		{"unclosed list on line 1 at EOF", "version: [1", []string{"1: invalid YAML: did not find expected ',' or ']'"}},
		{"bad indent", "version: 1\nsandbox:\n  cpus: 1\n   pids: 8\n", []string{"4: invalid YAML: mapping values are not allowed in this context"}},
		{"missing key", "version: 1\n? x\n- y\n", []string{"3: invalid YAML: did not find expected key"}},
		{"unclosed quote", "version: 1\nsandbox:\n  image: \"x\n", []string{"3: invalid YAML: found unexpected end of stream"}},
		{"tab", "version: 1\nsandbox:\n\tcpus: 1\n", []string{"3:1: invalid YAML: a tab in the indentation (YAML indents with spaces only)"}},
		{"tab in indentation", "version: 1\nsandbox:\n  cpus: 1\n\tpids: 8\n", []string{"4:1: invalid YAML: a tab in the indentation (YAML indents with spaces only)"}},
		{"tab after spaces", "version: 1\nsandbox:\n  \tcpus: 1\n", []string{"3:3: invalid YAML: a tab in the indentation (YAML indents with spaces only)"}},
		{"syntax on line 1", "version: @1\n", []string{"1: invalid YAML: found character that cannot start any token"}},
		{"bad escape on line 1", "version: \"\\ud800\"\n", []string{"1: invalid YAML: found invalid Unicode character escape code"}},
		{"syntax after the first document", "version: 1\n---\n[\n", []string{"3: invalid YAML: did not find expected node content"}},
		{"invalid UTF-8", "version: 1\nsandbox:\n  image: \"ab\xff\"\n", []string{"3:13: the file is not valid UTF-8 (byte 0xff)"}},
		{"control character in file", "version: 1\n# caf\u00e9 \x01\n", []string{"2:8: character U+0001 is not allowed in YAML"}},
		{"NUL", "version: 1\x00\n", []string{"1:11: character U+0000 is not allowed in YAML"}},

		// Keys.
		{"unknown top", "version: 1\nsandbox: {}\ntimeout: 5s\n", []string{`3:1: unknown key "timeout" at the top level; known keys: version, sandbox, pool, sessions, snapshots, tasks, skills, mounts, artifacts, inputs, tools, resources, budgets, tokenize, audit, http; "timeout" is a key of sandbox`}},
		{"unknown typo", "version: 1\nsandbox:\n  max-timeout: 5m\n", []string{`3:3: unknown key "max-timeout" in sandbox; known keys: engine, oci_runtime, image, variant, timeout, max_timeout, memory, cpus, pids, tmpfs_size, output_limit, max_concurrent, queue, max_code_bytes, max_request_bytes, require_enforced_limits; did you mean "max_timeout"?`}},
		{"unknown typo 2", "version: 1\nsandbox:\n  memroy: 1Gi\n", []string{`3:3: unknown key "memroy" in sandbox; known keys: engine, oci_runtime, image, variant, timeout, max_timeout, memory, cpus, pids, tmpfs_size, output_limit, max_concurrent, queue, max_code_bytes, max_request_bytes, require_enforced_limits; did you mean "memory"?`}},
		{"unknown no suggestion", "version: 1\naudit:\n  path: x\n", []string{`3:3: unknown key "path" in audit; known keys: file`}},
		{"unknown in rule", "version: 1\ntools:\n  rules:\n    - action: deny\n      tools: x\n", []string{`5:7: unknown key "tools" in tools.rules[0]; known keys: server, tool, annotations, action, reason; did you mean "tool"?`}},
		{"unknown annotation", "version: 1\ntools:\n  rules:\n    - action: deny\n      annotations: {read_only_hint: true}\n", []string{`5:21: unknown key "read_only_hint" in tools.rules[0].annotations; known keys: readOnlyHint, destructiveHint, idempotentHint, openWorldHint; did you mean "readOnlyHint"?`}},
		{"unknown in rate", "version: 1\nbudgets:\n  rates:\n    - rate: 1/s\n      brust: 2\n", []string{`5:7: unknown key "brust" in budgets.rates[0]; known keys: server, tool, per, rate, burst; did you mean "burst"?`}},
		{"duplicate", "version: 1\nsandbox:\n  cpus: 1\n  cpus: 2\n", []string{`4:3: duplicate key "cpus" in sandbox (first at line 3)`}},
		{"duplicate top", "version: 1\nversion: 1\n", []string{`2:1: duplicate key "version" in the top level (first at line 1)`}},
		{"non-scalar key", "version: 1\nsandbox:\n  ? [a]\n  : 1\n", []string{`3:5: a key of sandbox is a list: keys are plain names`}},
		{"merge key", "version: 1\nsandbox:\n  <<: {cpus: 2}\n", []string{`3:3: merge keys (<<) are not supported; write the keys out`}},

		// Anchors, aliases, tags.
		{"anchor and alias", "version: 1\nsandbox:\n  timeout: &t 60s\nbudgets:\n  call_timeout: *t\n", []string{
			"3:12: anchor &t: anchors and aliases are not supported; write the value out",
			"5:17: alias *t: anchors and aliases are not supported; write the value out"}},
		{"billion laughs", "a: &a [x, x]\nb: &b [*a, *a]\nversion: 1\n", []string{
			`1:1: unknown key "a" at the top level; known keys: version, sandbox, pool, sessions, snapshots, tasks, skills, mounts, artifacts, inputs, tools, resources, budgets, tokenize, audit, http`,
			"1:4: anchor &a: anchors and aliases are not supported; write the value out",
			`2:1: unknown key "b" at the top level; known keys: version, sandbox, pool, sessions, snapshots, tasks, skills, mounts, artifacts, inputs, tools, resources, budgets, tokenize, audit, http`,
			"2:4: anchor &b: anchors and aliases are not supported; write the value out",
			"2:8: alias *a: anchors and aliases are not supported; write the value out",
			"2:12: alias *a: anchors and aliases are not supported; write the value out"}},
		{"tag", "version: !!str 1\n", []string{"1:10: tag !!str: YAML tags are not supported; write the value without it"}},
		{"custom tag", "version: 1\nsandbox: !thing {}\n", []string{"2:10: tag !thing: YAML tags are not supported; write the value without it"}},

		// Wrong types.
		{"string for number", "version: 1\nsandbox:\n  pids: \"64\"\n", []string{`3:9: sandbox.pids: want a whole number, got a string "64"`}},
		{"float for int", "version: 1\nsandbox:\n  max_concurrent: 1.5\n", []string{`3:19: sandbox.max_concurrent: want a whole number, got a number 1.5`}},
		{"hex int", "version: 1\nsandbox:\n  queue: 0x10\n", []string{`3:10: sandbox.queue: want a whole number, got a number 0x10`}},
		{"list for map", "version: 1\nsandbox: [cpus]\n", []string{`2:10: sandbox: want a mapping of keys, got a list`}},
		{"scalar for map", "version: 1\ntools: deny\n", []string{`2:8: tools: want a mapping of keys, got a string "deny"`}},
		{"map for list", "version: 1\ntools:\n  rules: {action: deny}\n", []string{`3:10: tools.rules: want a list of rules, got a mapping`}},
		{"null scalar", "version: 1\nsandbox:\n  memory:\n", []string{`3:3: sandbox.memory: want a size such as 512Mi, got null (no value); remove the key to use the default`}},
		{"explicit null", "version: 1\nsandbox:\n  cpus: null\n", []string{`3:9: sandbox.cpus: want a number, got null (no value); remove the key to use the default`}},
		{"null servers", "version: 1\ntools:\n  servers:\n", []string{`3:3: tools.servers: want a list of server name globs, e.g. ["*"] or ["github", "fs-*"], got null (no value); remove the key to use the default`}},
		{"number for string", "version: 1\ntools:\n  rules:\n    - tool: 123\n      action: deny\n", []string{`4:13: tools.rules[0].tool: want a string (quote it: "123"), got a number 123`}},
		{"bool for string", "version: 1\ntools:\n  rules:\n    - reason: no\n      action: deny\n", nil}, // "no" is a string in YAML 1.2
		{"bool wanted", "version: 1\nsandbox:\n  require_enforced_limits: yes\n", []string{`3:28: sandbox.require_enforced_limits: want true or false, got a string "yes"`}},
		{"number for duration", "version: 1\nsandbox:\n  timeout: 30\n", []string{`3:12: sandbox.timeout: want a duration such as 30s, 5m or 1h30m, got a number 30: add a unit, e.g. 30s`}},
		{"list item not a map", "version: 1\ntools:\n  rules:\n    - deny\n", []string{`4:7: tools.rules[0]: want a rule (a mapping with action and optionally server, tool, annotations, reason), got a string "deny"`}},
		{"rate item not a map", "version: 1\nbudgets:\n  rates: [10/s]\n", []string{`3:11: budgets.rates[0]: want a rate (a mapping with rate and optionally server, tool, per, burst), got a string "10/s"`}},
		{"server glob not a string", "version: 1\ntools:\n  servers: [a, [b]]\n", []string{`3:16: tools.servers[1]: want a string, got a list`}},
		{"control character", "version: 1\ntools:\n  rules:\n    - reason: \"a\\x07b\"\n      action: deny\n", []string{`4:15: tools.rules[0].reason: the string holds a control character (U+0007)`}},
		{"space in image", "version: 1\nsandbox:\n  image: \"a b\"\n", []string{`3:10: sandbox.image: an image reference has no spaces: "a b"`}},
		{"unknown variant", "version: 1\nsandbox:\n  variant: data-science\n", []string{`3:12: sandbox.variant: "data-science" is not one of slim, datascience; did you mean "datascience"?`}},
		{"variant and image", "version: 1\nsandbox:\n  variant: datascience\n  image: localhost/mine:1\n",
			[]string{`3:12: sandbox.variant: datascience names an image this bridge builds, but sandbox.image names the image to run (localhost/mine:1): remove one of the two`}},

		// Asking the human, and tokenization.
		{"ask fallback ask", "version: 1\ntools:\n  ask_fallback: ask\n", []string{`3:17: tools.ask_fallback: "ask" is not one of deny, allow`}},
		{"ask timeout range", "version: 1\ntools:\n  ask_timeout: 2h\n", []string{`3:16: tools.ask_timeout: 2h is out of range: it must be 1s .. 1h`}},
		{"ask timeout short", "version: 1\ntools:\n  ask_timeout: 10ms\n", []string{`3:16: tools.ask_timeout: 10ms is out of range: it must be 1s .. 1h`}},
		{"ask remember", "version: 1\ntools:\n  ask_remember: session\n", []string{`3:17: tools.ask_remember: "session" is not one of off, run, connection`}},
		{"ask remember typo", "version: 1\ntools:\n  ask_remember: rnu\n", []string{`3:17: tools.ask_remember: "rnu" is not one of off, run, connection; did you mean "run"?`}},
		{"tokenize kind", "version: 1\ntokenize:\n  kinds: [email, ssn]\n", []string{`3:18: tokenize.kinds[1]: "ssn" is not one of email, phone, iban, card`}},
		{"tokenize kind twice", "version: 1\ntokenize:\n  kinds: [card, card]\n", []string{`3:17: tokenize.kinds[1]: card is listed twice`}},
		{"tokenize kinds scalar", "version: 1\ntokenize:\n  kinds: email\n", []string{`3:10: tokenize.kinds: want a list of kinds, some of ["email", "phone", "iban", "card"], got a string "email"`}},
		{"pattern name", "version: 1\ntokenize:\n  patterns:\n    - {name: Customer, regex: \"C[0-9]+\"}\n", []string{`4:14: tokenize.patterns[0].name: "Customer" is not a pattern name: 1 to 32 lower-case letters, digits or '_', starting with a letter`}},
		{"pattern builtin name", "version: 1\ntokenize:\n  patterns:\n    - {name: email, regex: \"x@y\"}\n", []string{`4:14: tokenize.patterns[0].name: "email" is a built-in kind: list it in tokenize.kinds, or name the pattern otherwise`}},
		{"pattern bad regex", "version: 1\ntokenize:\n  patterns:\n    - {name: id, regex: \"ID-(\"}\n", []string{`4:25: tokenize.patterns[0].regex: not a regular expression (RE2 syntax): error parsing regexp: missing closing ): ` + "`ID-(`"}},
		{"pattern empty match", "version: 1\ntokenize:\n  patterns:\n    - {name: id, regex: \"[0-9]*\"}\n", []string{`4:25: tokenize.patterns[0].regex: "[0-9]*" can match the empty string (alone or at a word boundary, ^ or $); it must match a value`}},
		{"pattern empty at a boundary", "version: 1\ntokenize:\n  patterns:\n    - {name: id, regex: \"\\\\b[0-9]{0,12}\\\\b\"}\n", []string{`4:25: tokenize.patterns[0].regex: "\\b[0-9]{0,12}\\b" can match the empty string (alone or at a word boundary, ^ or $); it must match a value`}},
		{"pattern missing regex", "version: 1\ntokenize:\n  patterns:\n    - {name: id}\n", []string{`4:7: tokenize.patterns[0]: missing regex: a pattern has a name and a regex`}},
		{"pattern twice", "version: 1\ntokenize:\n  results: [{server: crm}]\n  patterns:\n    - {name: id, regex: \"I[0-9]\"}\n    - {name: id, regex: \"J[0-9]\"}\n", []string{`6:14: tokenize.patterns[1].name: a pattern named "id" is defined already`}},
		{"results not a list", "version: 1\ntokenize:\n  results: crm\n", []string{`3:12: tokenize.results: want a list of tools ({server, tool}), got a string "crm"`}},
		{"results item", "version: 1\ntokenize:\n  results: [crm]\n", []string{`3:13: tokenize.results[0]: want a mapping with server and tool globs, got a string "crm"`}},
		{"restore unknown key", "version: 1\ntokenize:\n  results: [{server: a}]\n  restore:\n    - {server: a, tools: b}\n", []string{`5:19: unknown key "tools" in tokenize.restore[0]; known keys: server, tool; did you mean "tool"?`}},
		{"restore without results", "version: 1\ntokenize:\n  restore:\n    - {server: crm, tool: send_*}\n", []string{`2:1: tokenize: restore set, but tokenize.results is empty, so tokenization would be off: list in results the tools whose results are tokenized (e.g. - {server: crm, tool: "*"}), or remove the section`}},
		{"patterns without results", "version: 1\ntokenize:\n  results: []\n  patterns:\n    - {name: id, regex: \"I[0-9]+\"}\n  restore: [{server: crm}]\n", []string{`2:1: tokenize: restore and patterns set, but tokenize.results is empty, so tokenization would be off: list in results the tools whose results are tokenized (e.g. - {server: crm, tool: "*"}), or remove the section`}},
		{"max values", "version: 1\ntokenize:\n  max_values: 0\n", []string{`3:15: tokenize.max_values: 0 is out of range: it must be 1 .. 1000000`}},

		// Required keys.
		{"missing action", "version: 1\ntools:\n  rules:\n    - server: x\n", []string{`4:7: tools.rules[0]: missing action: every rule says allow, deny or ask`}},
		{"missing rate", "version: 1\nbudgets:\n  rates:\n    - burst: 3\n", []string{`4:7: budgets.rates[0]: missing rate: say how many calls, e.g. rate: 10/s`}},

		// Enums.
		{"engine", "version: 1\nsandbox:\n  engine: Podman\n", []string{`3:11: sandbox.engine: "Podman" is not one of auto, podman, docker, kubernetes, runsc; did you mean "podman"?`}},
		{"engine far", "version: 1\nsandbox:\n  engine: lxc\n", []string{`3:11: sandbox.engine: "lxc" is not one of auto, podman, docker`}},
		{"oci runtime", "version: 1\nsandbox:\n  oci_runtime: gvisor\n", []string{`3:16: sandbox.oci_runtime: "gvisor" is not one of default, runc, runsc`}},
		{"oci runtime typo", "version: 1\nsandbox:\n  oci_runtime: rnsc\n", []string{`3:16: sandbox.oci_runtime: "rnsc" is not one of default, runc, runsc; did you mean "runsc"?`}},
		{"oci runtime path", "version: 1\nsandbox:\n  oci_runtime: /usr/bin/runsc\n", []string{`3:16: sandbox.oci_runtime: "/usr/bin/runsc" is not one of default, runc, runsc`}},
		{"oci runtime empty", "version: 1\nsandbox:\n  oci_runtime: \"\"\n", []string{`3:16: sandbox.oci_runtime: "" is not one of default, runc, runsc`}},
		{"oci runtime bool", "version: 1\nsandbox:\n  oci_runtime: true\n", []string{`3:16: sandbox.oci_runtime: want one of default, runc, runsc, got a boolean true`}},
		{"default", "version: 1\ntools:\n  default: block\n", []string{`3:12: tools.default: "block" is not one of allow, deny, ask`}},
		{"action", "version: 1\ntools:\n  rules:\n    - action: alow\n", []string{`4:15: tools.rules[0].action: "alow" is not one of allow, deny, ask; did you mean "allow"?`}},
		{"per", "version: 1\nbudgets:\n  rates:\n    - rate: 1/s\n      per: run\n", []string{`5:12: budgets.rates[0].per: "run" is not one of tool, server`}},
		{"bool enum", "version: 1\ntools:\n  default: true\n", []string{`3:12: tools.default: want one of allow, deny, ask, got a boolean true`}},

		// Globs.
		{"bad glob", "version: 1\ntools:\n  rules:\n    - tool: \"get_[\"\n      action: deny\n", []string{`4:13: tools.rules[0].tool: invalid glob "get_[": unclosed [ or a \ at the end (globs use * ? [abc] [a-z] [^a], \ escapes)`}},
		{"bad server glob", "version: 1\ntools:\n  servers: [\"ok\", \"a\\\\\"]\n", []string{`3:19: tools.servers[1]: invalid glob "a\\": unclosed [ or a \ at the end (globs use * ? [abc] [a-z] [^a], \ escapes)`}},
		{"empty glob", "version: 1\nbudgets:\n  rates:\n    - rate: 1/s\n      server: \"\"\n", []string{`5:15: budgets.rates[0].server: an empty glob matches nothing; use "*" for any name`}},
		{"unquoted star", "version: 1\ntools:\n  servers: [*]\n", []string{`3:13: invalid YAML: an unquoted * (a bare * starts a YAML alias): quote globs, e.g. "*"`}},

		// Durations.
		{"bad duration", "version: 1\nsandbox:\n  timeout: 5 minutes\n", []string{`3:12: sandbox.timeout: invalid duration "5 minutes": want a duration such as 30s, 5m or 1h30m (units ns, us, ms, s, m, h)`}},
		{"zero duration", "version: 1\nbudgets:\n  call_timeout: 0s\n", []string{`3:17: budgets.call_timeout: 0s is out of range: it must be more than 0`}},
		{"negative duration", "version: 1\nsandbox:\n  timeout: -5s\n", []string{`3:12: sandbox.timeout: -5s is out of range: it must be more than 0`}},
		{"overflowing duration", "version: 1\nsandbox:\n  max_timeout: 9999999999h\n", []string{`3:16: sandbox.max_timeout: invalid duration "9999999999h": want a duration such as 30s, 5m or 1h30m (units ns, us, ms, s, m, h)`}},
		{"max_timeout below timeout", "version: 1\nsandbox:\n  timeout: 2m\n  max_timeout: 1m\n", []string{`4:16: sandbox.max_timeout (60s) is less than sandbox.timeout (2m); it must be at least as long`}},
		{"timeout above default max", "version: 1\nsandbox:\n  timeout: 10m\n", []string{`3:12: sandbox.timeout (10m) is longer than sandbox.max_timeout (5m, the default); raise max_timeout too`}},

		// Sizes.
		{"bad size", "version: 1\nsandbox:\n  memory: 1.5Gi\n", []string{`3:11: sandbox.memory: invalid size "1.5Gi": write a whole number of bytes, or one with a unit: Ki, Mi, Gi, Ti (1024s) or K, M, G, T (1000s), e.g. 512Mi`}},
		{"size unit case", "version: 1\nsandbox:\n  memory: 512mb\n", []string{`3:11: sandbox.memory: invalid size "512mb"`}},
		{"huge size", "version: 1\nsandbox:\n  memory: 99999999999Ti\n", []string{`3:11: sandbox.memory: invalid size "99999999999Ti": too large`}},
		{"memory low", "version: 1\nsandbox:\n  memory: 8Mi\n", []string{`3:11: sandbox.memory: 8Mi is out of range: the minimum is 16Mi`}},
		{"tmpfs low", "version: 1\nsandbox:\n  tmpfs_size: 1000\n", []string{`3:15: sandbox.tmpfs_size: 1000 is out of range: the minimum is 1Mi`}},
		{"output low", "version: 1\nsandbox:\n  output_limit: 1000\n", []string{`3:17: sandbox.output_limit: 1000 is out of range: it must be 1Ki .. 16Mi`}},
		{"output high", "version: 1\nsandbox:\n  output_limit: 17Mi\n", []string{`3:17: sandbox.output_limit: 17Mi is out of range: it must be 1Ki .. 16Mi`}},
		{"argument bytes zero", "version: 1\nbudgets:\n  max_argument_bytes: 0\n", []string{`3:23: budgets.max_argument_bytes: 0 is out of range: it must be 1 .. 4Mi`}},
		{"argument bytes high", "version: 1\nbudgets:\n  max_argument_bytes: 5Mi\n", []string{`3:23: budgets.max_argument_bytes: 5Mi is out of range: it must be 1 .. 4Mi`}},
		{"result bytes high", "version: 1\nbudgets:\n  max_result_bytes: 9M\n", []string{`3:21: budgets.max_result_bytes: 9M is out of range: it must be 1 .. 8Mi`}},
		{"negative size", "version: 1\nsandbox:\n  memory: -1\n", []string{`3:11: sandbox.memory: invalid size "-1"`}},

		// Numbers.
		{"cpus low", "version: 1\nsandbox:\n  cpus: 0.001\n", []string{`3:9: sandbox.cpus: 0.001 is out of range: it must be 0.01 .. 1024`}},
		{"cpus high", "version: 1\nsandbox:\n  cpus: 2000\n", []string{`3:9: sandbox.cpus: 2000 is out of range: it must be 0.01 .. 1024`}},
		{"cpus nan", "version: 1\nsandbox:\n  cpus: .nan\n", []string{`3:9: sandbox.cpus: want a number, got a number .nan`}},
		{"cpus inf", "version: 1\nsandbox:\n  cpus: .inf\n", []string{`3:9: sandbox.cpus: want a number, got a number .inf`}},
		{"pids low", "version: 1\nsandbox:\n  pids: 4\n", []string{`3:9: sandbox.pids: 4 is out of range: it must be 8 .. 4194304`}},
		{"int overflow", "version: 1\nsandbox:\n  pids: 99999999999999999999\n", []string{`3:9: sandbox.pids: want a whole number, got a number 99999999999999999999`}},
		{"max_concurrent zero", "version: 1\nsandbox:\n  max_concurrent: 0\n", []string{`3:19: sandbox.max_concurrent: 0 is out of range: it must be 1 .. 1024`}},
		{"queue negative", "version: 1\nsandbox:\n  queue: -1\n", []string{`3:10: sandbox.queue: -1 is out of range: it must be 0 .. 65536`}},
		{"max calls negative", "version: 1\nbudgets:\n  max_calls_per_run: -1\n", []string{`3:22: budgets.max_calls_per_run: -1 is out of range: it must be 0 .. 1000000000`}},
		{"burst zero", "version: 1\nbudgets:\n  rates:\n    - rate: 1/s\n      burst: 0\n", []string{`5:14: budgets.rates[0].burst: 0 is out of range: it must be 1 .. 1000000000`}},

		// Rates.
		{"bad rate", "version: 1\nbudgets:\n  rates:\n    - rate: 10/min\n", []string{`4:13: budgets.rates[0].rate: invalid rate "10/min": want N/s, N/m or N/h with N a positive number, e.g. 10/s`}},
		{"rate number", "version: 1\nbudgets:\n  rates:\n    - rate: 10\n", []string{`4:13: budgets.rates[0].rate: want a rate such as 10/s, 600/m or 3600/h, got a number 10: add a unit, e.g. 10/s`}},
		{"zero rate", "version: 1\nbudgets:\n  rates:\n    - rate: 0/s\n", []string{`4:13: budgets.rates[0].rate: 0/s is out of range: it must be more than 0 and at most 1000000000/s`}},
		{"huge rate", "version: 1\nbudgets:\n  rates:\n    - rate: 2000000000/s\n", []string{`4:13: budgets.rates[0].rate: 2000000000/s is out of range: it must be more than 0 and at most 1000000000/s`}},
		{"negative rate", "version: 1\nbudgets:\n  rates:\n    - rate: -1/s\n", []string{`4:13: budgets.rates[0].rate: invalid rate "-1/s"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte(c.src), "f.yaml")
			if c.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; parsed %+v", p)
			}
			if p != nil {
				t.Error("a Policy returned with an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T, want *ParseError", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(c.want) || len(pe.Problems) != len(c.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(pe.Problems), len(c.want), err)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(lines[i], "f.yaml:"+w) {
					t.Errorf("problem %d:\n got %s\nwant f.yaml:%s", i, lines[i], w)
				}
				if pe.Problems[i].File != "f.yaml" {
					t.Errorf("problem %d: File %q", i, pe.Problems[i].File)
				}
			}
		})
	}
}

// Every problem is reported, in file order, one per line of Error().
func TestParseErrorAllProblemsInOrder(t *testing.T) {
	src := `version: 1
budgets:
  max_result_bytes: 9Mi
sandbox:
  cpus: many
  memory: 1Mi
tools:
  rules:
    - action: maybe
`
	_, err := Parse([]byte(src), "/etc/bridge/policy.yaml")
	want := `/etc/bridge/policy.yaml:3:21: budgets.max_result_bytes: 9Mi is out of range: it must be 1 .. 8Mi
/etc/bridge/policy.yaml:5:9: sandbox.cpus: want a number, got a string "many"
/etc/bridge/policy.yaml:6:11: sandbox.memory: 1Mi is out of range: the minimum is 16Mi
/etc/bridge/policy.yaml:9:15: tools.rules[0].action: "maybe" is not one of allow, deny, ask`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	pe := err.(*ParseError)
	if p := pe.Problems[1]; p.Line != 5 || p.Column != 9 || p.Message != `sandbox.cpus: want a number, got a string "many"` {
		t.Errorf("Problems[1] = %+v", p)
	}
}

func TestParseErrorManyProblems(t *testing.T) {
	_, err := Parse([]byte("version: 1\nsandbox:\n"+strings.Repeat("  cpus: 1\n", 1000)), "f.yaml")
	pe, ok := err.(*ParseError)
	if !ok || len(pe.Problems) != 101 || pe.Problems[99].Line != 103 || pe.Problems[100].String() != "f.yaml: and 899 more problems" {
		t.Fatalf("%v", err)
	}
}

func TestProblemString(t *testing.T) {
	for _, c := range []struct {
		p    Problem
		want string
	}{
		{Problem{"a.yaml", 3, 7, "m"}, "a.yaml:3:7: m"},
		{Problem{"a.yaml", 3, 0, "m"}, "a.yaml:3: m"},
		{Problem{"a.yaml", 0, 0, "m"}, "a.yaml: m"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

func TestRulePositions(t *testing.T) {
	p := mustParse(t, "version: 1\ntools:\n  rules: [{action: allow}, {action: deny}]\nbudgets:\n  rates:\n  -   rate: 1/s\n")
	if r := p.Tools.Rules; r[0].Line != 3 || r[0].Column != 11 || r[1].Line != 3 || r[1].Column != 28 {
		t.Errorf("rule positions %d:%d %d:%d", r[0].Line, r[0].Column, r[1].Line, r[1].Column)
	}
	if r := p.Budgets.Rates[0]; r.Line != 6 || r.Column != 7 {
		t.Errorf("rate position %d:%d", r.Line, r.Column)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte("version: 1\nsandbox:\n  cpus: 2\naudit:\n  file: audit.jsonl\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != path || p.Sandbox.CPUs != 2 || p.Audit.File != filepath.Join(dir, "audit.jsonl") {
		t.Errorf("Load = %+v", p)
	}

	missing := filepath.Join(dir, "nope.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Load(dir) = %v", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nsandbox:\n  cpu: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+`:3:3: unknown key "cpu" in sandbox`) {
		t.Errorf("Load(bad) = %v", err)
	}

	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(huge); err == nil || !strings.Contains(err.Error(), "the file is 1048577 bytes; a policy file may have at most 1048576") {
		t.Errorf("Load(huge) = %v", err)
	}
}

// closest suggests only likely typos.
func TestClosest(t *testing.T) {
	for key, want := range map[string]string{
		"timout": "timeout", "Timeout": "timeout", "maxTimeout": "max_timeout", "max-timeout": "max_timeout",
		"tmpfs": "", "cpu": "cpus", "pid": "pids", "memroy": "memory", "x": "", "image_name": "", "queu": "queue",
		"concurrency": "", "enigne": "engine",
	} {
		if got := closest(key, sandboxKeys); got != want {
			t.Errorf("closest(%q) = %q, want %q", key, got, want)
		}
	}
}

// docs/policy.md's tables give the same defaults as the code, and name
// every key.
func TestDocsDefaults(t *testing.T) {
	data, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	formatted := Format(Default())
	for _, section := range []string{"sandbox", "pool", "sessions", "snapshots", "skills", "artifacts", "tools", "resources", "budgets", "audit", "http"} {
		i := strings.Index(doc, "### `"+section+"`")
		if i < 0 {
			t.Fatalf("docs/policy.md has no section %s", section)
		}
		var header []string
		rows := 0
		for _, line := range strings.Split(doc[i:], "\n")[1:] {
			if !strings.HasPrefix(line, "|") {
				if rows > 0 || header != nil {
					break // the end of the section's first table
				}
				continue
			}
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			switch {
			case header == nil:
				header = cells
				continue
			case strings.HasPrefix(cells[0], "---"):
				continue
			}
			rows++
			key := strings.Trim(cells[0], "`")
			def := cells[slices.Index(header, "default")]
			if strings.Count(def, "`") == 2 && strings.HasPrefix(def, "`") && strings.HasSuffix(def, "`") {
				want := "  " + key + ": " + strings.Trim(def, "`") + "\n"
				if !strings.Contains(formatted, want) {
					t.Errorf("docs/policy.md: %s.%s defaults to %s; the code's default is not that:\n%s", section, key, def, formatted)
				}
			} else if def != "none" {
				t.Errorf("docs/policy.md: %s.%s: default %q is not one value", section, key, def)
			}
		}
		if rows == 0 {
			t.Errorf("docs/policy.md: no table under %s", section)
		}
	}
	for _, keys := range [][]string{topKeys, sandboxKeys, poolKeys, sessionsKeys, snapshotsKeys, tasksKeys, skillsKeys, mountKeys, artifactsKeys, inputsKeys, toolsKeys, ruleKeys, annotationKeys, resourcesKeys, resourceRuleKeys, budgetsKeys, rateKeys, auditKeys, httpKeys} {
		for _, k := range keys {
			if !strings.Contains(doc, "`"+k+"`") {
				t.Errorf("docs/policy.md does not mention `%s`", k)
			}
		}
	}
}
