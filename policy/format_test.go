package policy

import (
	"math"
	"math/rand"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFormatDefault(t *testing.T) {
	want := `# The built-in default policy.
version: 1
sandbox:
  engine: auto
  oci_runtime: default
  image: ""
  variant: slim
  timeout: 60s
  max_timeout: 5m
  memory: 512Mi
  cpus: 1
  pids: 128
  tmpfs_size: 64Mi
  output_limit: 64Ki
  max_concurrent: 4
  queue: 16
  max_code_bytes: 1Mi
  max_request_bytes: 4Mi
  require_enforced_limits: true
pool:
  size: 2
  max: 8
  shrink_after: 60s
  max_age: 10m
sessions:
  enabled: false
  max: 4
  max_per_principal: 0
  idle_timeout: 10m
  max_lifetime: 1h
  max_calls: 200
snapshots:
  enabled: true
  dir: ""
  max_count: 20
  max_bytes: 1Gi
  ttl: 168h
tasks:
  enabled: true
  after: 2s
  max: 64
  max_per_principal: 8
  result_ttl: 10m
  max_result_bytes: 64Mi
skills:
  dir: ""
  save: true
  overwrite: false
  read_only: false
  max_count: 100
  max_bytes: 64Ki
mounts: []
artifacts:
  max_files: 20
  max_bytes_inline: 1Mi
  max_bytes_total: 4Mi
  dir: ""
  by_reference: large
  max_bytes_stored: 256Mi
  max_bytes_kept: 1Gi
  max_bytes_read: 8Mi
  expiry: 1h
inputs:
  max_files: 20
  max_file_bytes: 32Mi
  max_bytes: 32Mi
tools:
  servers: ["*"]
  default: allow
  rules: []
  ask_fallback: deny
  ask_timeout: 2m
  ask_remember: run
  ask_max_per_run: 10
  on_change: deny
  lock_file: ""
resources:
  default: allow
  rules: []
  max_bytes: 8Mi
budgets:
  max_calls_per_run: 1000
  max_argument_bytes: 1Mi
  max_result_bytes: 8Mi
  call_timeout: 60s
  rates: []
tokenize:
  kinds: ["email", "phone", "iban", "card"]
  patterns: []
  results: []
  restore: []
  max_values: 10000
audit:
  file: ""
http:
  max_sessions: 1000
  max_sessions_per_client: 100
  session_idle_timeout: 30m
  session_min_idle: 60s
`
	if got := Format(Default()); got != want {
		t.Errorf("Format(Default()) =\n%s\nwant\n%s", got, want)
	}
	// Every key of the file format is written, in the order of the lists
	// Parse checks keys against.
	got := Format(Default())
	at := 0
	var keys []string
	for _, ks := range [][]string{{"version"}, sandboxKeys, {"snapshots"}, snapshotsKeys, {"mounts"}, artifactsKeys, toolsKeys, budgetsKeys, auditKeys, httpKeys} {
		keys = append(keys, ks...)
	}
	for _, k := range keys {
		j := strings.Index(got[at:], k+":")
		if j < 0 {
			t.Fatalf("Format(Default()) lacks %s (or has it out of order)", k)
		}
		at += j + len(k)
	}
}

func TestFormatWithRulesAndRates(t *testing.T) {
	tr, fa := true, false
	p := Default()
	p.Source = "/etc/bridge/policy.yaml"
	p.Tools.Servers = []string{}
	p.Tools.Default = Deny
	p.Tools.Rules = []Rule{
		{Server: "github", Tool: "delete_*", Action: Deny, Reason: `say "no"`},
		{Server: "*", Tool: "*", Annotations: Annotations{ReadOnlyHint: &tr, OpenWorldHint: &fa}, Action: Allow},
	}
	p.Budgets.Rates = []Rate{{Server: "*", Tool: "*", Per: "server", PerSecond: 1.0 / 60, Burst: 1}}
	p.Resources = Resources{Default: Deny, Rules: []ResourceRule{{Server: "fs", URI: "file:///data/*", Action: Allow}}, MaxBytes: 1 << 20}
	want := `# The policy in "/etc/bridge/policy.yaml" with every default written out.
version: 1
sandbox:
  engine: auto
  oci_runtime: default
  image: ""
  variant: slim
  timeout: 60s
  max_timeout: 5m
  memory: 512Mi
  cpus: 1
  pids: 128
  tmpfs_size: 64Mi
  output_limit: 64Ki
  max_concurrent: 4
  queue: 16
  max_code_bytes: 1Mi
  max_request_bytes: 4Mi
  require_enforced_limits: true
pool:
  size: 2
  max: 8
  shrink_after: 60s
  max_age: 10m
sessions:
  enabled: false
  max: 4
  max_per_principal: 0
  idle_timeout: 10m
  max_lifetime: 1h
  max_calls: 200
snapshots:
  enabled: true
  dir: ""
  max_count: 20
  max_bytes: 1Gi
  ttl: 168h
tasks:
  enabled: true
  after: 2s
  max: 64
  max_per_principal: 8
  result_ttl: 10m
  max_result_bytes: 64Mi
skills:
  dir: ""
  save: true
  overwrite: false
  read_only: false
  max_count: 100
  max_bytes: 64Ki
mounts: []
artifacts:
  max_files: 20
  max_bytes_inline: 1Mi
  max_bytes_total: 4Mi
  dir: ""
  by_reference: large
  max_bytes_stored: 256Mi
  max_bytes_kept: 1Gi
  max_bytes_read: 8Mi
  expiry: 1h
inputs:
  max_files: 20
  max_file_bytes: 32Mi
  max_bytes: 32Mi
tools:
  servers: []
  default: deny
  rules:
    - server: "github"
      tool: "delete_*"
      annotations: {}
      action: deny
      reason: "say \"no\""
    - server: "*"
      tool: "*"
      annotations: {readOnlyHint: true, openWorldHint: false}
      action: allow
      reason: ""
  ask_fallback: deny
  ask_timeout: 2m
  ask_remember: run
  ask_max_per_run: 10
  on_change: deny
  lock_file: ""
resources:
  default: deny
  rules:
    - server: "fs"
      uri: "file:///data/*"
      action: allow
      reason: ""
  max_bytes: 1Mi
budgets:
  max_calls_per_run: 1000
  max_argument_bytes: 1Mi
  max_result_bytes: 8Mi
  call_timeout: 60s
  rates:
    - server: "*"
      tool: "*"
      per: server
      rate: 1/m
      burst: 1
tokenize:
  kinds: ["email", "phone", "iban", "card"]
  patterns: []
  results: []
  restore: []
  max_values: 10000
audit:
  file: ""
http:
  max_sessions: 1000
  max_sessions_per_client: 100
  session_idle_timeout: 30m
  session_min_idle: 60s
`
	got := Format(p)
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	q, err := Parse([]byte(got), p.Source)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalized(q), normalized(p)) {
		t.Errorf("round trip:\n%+v\n%+v", q, p)
	}
}

func TestFormatRate(t *testing.T) {
	for in, want := range map[string]string{
		"10/s": "10/s", "0.5/s": "30/m", "600/m": "10/s", "1/m": "1/m", "90/m": "90/m", "3600/h": "1/s",
		"1/h": "1/h", "7/h": "7/h", "0.1/s": "6/m", "1000000000/s": "1000000000/s", "0.000001/s": "0.0036/h",
		"123.456/m": "2.0576/s", "2.5/h": "2.5/h", "0.25/s": "15/m", "0.3/m": "18/h", "1.5/s": "90/m",
	} {
		p := mustParse(t, "version: 1\nbudgets:\n  rates:\n    - rate: "+in+"\n")
		ps := p.Budgets.Rates[0].PerSecond
		got := FormatRate(ps)
		if got != want {
			t.Errorf("FormatRate(%s = %v/s) = %q, want %q", in, ps, got, want)
		}
		q := mustParse(t, "version: 1\nbudgets:\n  rates:\n    - rate: "+got+"\n")
		if q.Budgets.Rates[0].PerSecond != ps {
			t.Errorf("%s: %q reads back as %v, want %v", in, got, q.Budgets.Rates[0].PerSecond, ps)
		}
	}
}

// The example file goes through Format and Parse unchanged.
func TestRoundTripExample(t *testing.T) {
	data, err := os.ReadFile("../policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, data)
}

// roundTrip parses data and checks that Format writes it back exactly:
// Parse(Format(p)) == p, and Format of that is the same text again.
func roundTrip(t *testing.T, data []byte) {
	t.Helper()
	p, err := Parse(data, "rt.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checkRoundTrip(t, p)
}

func checkRoundTrip(t *testing.T, p *Policy) {
	t.Helper()
	out := Format(p)
	q, err := Parse([]byte(out), p.Source)
	if err != nil {
		t.Fatalf("Parse(Format(p)): %v\n%s", err, out)
	}
	if !reflect.DeepEqual(normalized(q), normalized(p)) {
		t.Fatalf("Parse(Format(p)) != p\nFormat(p):\n%s\nFormat(Parse(Format(p))):\n%s\np: %#v\nq: %#v", out, Format(q), p, q)
	}
	if again := Format(q); again != out {
		t.Fatalf("Format is not stable:\n%s\n---\n%s", out, again)
	}
}

// Random valid policies, with values anywhere in their ranges (not only
// round ones), survive Format and Parse.
func TestRoundTripRandom(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := 0; i < n; i++ {
		p := randomPolicy(rng)
		ok := t.Run("", func(t *testing.T) { checkRoundTrip(t, p) })
		if !ok {
			t.Fatalf("seed %d, policy %d", seed, i)
		}
	}
}

func randomPolicy(rng *rand.Rand) *Policy {
	between := func(lo, hi int64) int64 { return lo + rng.Int63n(hi-lo+1) }
	pick := func(ss ...string) string { return ss[rng.Intn(len(ss))] }
	// A size: round in some unit, or any number of bytes.
	size := func(lo, hi int64) int64 {
		switch rng.Intn(3) {
		case 0:
			return between(lo, hi)
		default:
			unit := []int64{1, 1 << 10, 1 << 20, 1 << 30, 1e3, 1e6}[rng.Intn(6)]
			if hi/unit < (lo+unit-1)/unit {
				return between(lo, hi)
			}
			return between((lo+unit-1)/unit, hi/unit) * unit
		}
	}
	dur := func() time.Duration {
		switch rng.Intn(4) {
		case 0:
			return time.Duration(between(1, int64(48*time.Hour)))
		case 1:
			return time.Duration(between(1, 7200)) * time.Second
		case 2:
			return time.Duration(between(1, 300)) * time.Minute
		default:
			return time.Duration(between(1, math.MaxInt64))
		}
	}
	float := func(lo, hi float64) float64 {
		switch rng.Intn(3) {
		case 0:
			return lo + rng.Float64()*(hi-lo)
		case 1:
			return math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
		default:
			return math.Max(lo, math.Min(hi, math.Round((lo+rng.Float64()*(hi-lo))*100)/100))
		}
	}
	str := func(alphabet string, maxLen int) string {
		rs := []rune(alphabet)
		var b strings.Builder
		for n := rng.Intn(maxLen + 1); n > 0; n-- {
			b.WriteRune(rs[rng.Intn(len(rs))])
		}
		return b.String()
	}
	const text = "abcXYZ019 _-.:#'\"\\/{}[],&*!|>%@`~é日本🙂\u00a0\u2028\ufeff\u00ad"
	glob := func() string {
		for {
			g := pick("*", "github", "fs-*", "delete_*", "a?c", "[a-c]*", `\*`, "x[^y]z", "") + str("abc*?-_.[]^\\ é", 6)
			if g == "" {
				continue
			}
			if _, err := path.Match(g, ""); err == nil {
				return g
			}
		}
	}
	boolp := func() *bool {
		if rng.Intn(2) == 0 {
			return nil
		}
		b := rng.Intn(2) == 0
		return &b
	}

	p := Default()
	s := &p.Sandbox
	s.Engine = pick("auto", "podman", "docker")
	s.OCIRuntime = pick("default", "runc", "runsc")
	s.Image = pick("", "localhost/bridge-runner:dev", "ghcr.io/x/y@sha256:"+strings.Repeat("ab", 32)) + str("abc:/._-é", 3)
	if s.Image == "" { // a variant other than slim with an image is an error
		s.Variant = pick("slim", "datascience")
	}
	s.Timeout = dur()
	s.MaxTimeout = s.Timeout + time.Duration(between(0, math.MaxInt64-int64(s.Timeout)))
	if rng.Intn(2) == 0 {
		s.MaxTimeout = s.Timeout
	}
	s.Memory = size(minMemory, math.MaxInt64)
	s.CPUs = float(minCPUs, maxCPUs)
	s.Pids = between(minPids, maxPids)
	s.TmpfsSize = size(minTmpfsSize, math.MaxInt64)
	s.OutputLimit = size(minOutputLimit, maxOutputLimit)
	s.MaxConcurrent = int(between(1, maxConcurrent))
	s.Queue = int(between(0, maxQueue))
	s.RequireEnforcedLimits = rng.Intn(2) == 0

	t := &p.Tools
	t.Servers = []string{}
	for n := rng.Intn(4); n > 0; n-- {
		t.Servers = append(t.Servers, glob())
	}
	t.Default = Action(pick("allow", "deny"))
	for n := rng.Intn(5); n > 0; n-- {
		t.Rules = append(t.Rules, Rule{
			Server: glob(), Tool: glob(),
			Annotations: Annotations{ReadOnlyHint: boolp(), DestructiveHint: boolp(), IdempotentHint: boolp(), OpenWorldHint: boolp()},
			Action:      Action(pick("allow", "deny")),
			Reason:      str(text, 30),
		})
	}

	b := &p.Budgets
	b.MaxCallsPerRun = int(between(0, maxCallsPerRun))
	b.MaxArgumentBytes = size(1, maxArgumentBytes)
	b.MaxResultBytes = size(1, maxResultBytes)
	b.CallTimeout = dur()
	for n := rng.Intn(4); n > 0; n-- {
		var ps float64
		switch rng.Intn(3) {
		case 0:
			ps = float(1e-9, maxPerSecond)
		case 1:
			ps = float64(between(1, 1000)) / []float64{1, 60, 3600}[rng.Intn(3)]
		default:
			ps, _ = strconv.ParseFloat(strconv.FormatFloat(float(0.001, 1000), 'f', rng.Intn(4), 64), 64)
			ps = math.Max(ps, 0.001)
		}
		b.Rates = append(b.Rates, Rate{Server: glob(), Tool: glob(), Per: pick("tool", "server"), PerSecond: ps, Burst: int(between(1, maxBurst))})
	}

	a := &p.Artifacts
	a.MaxFiles = int(between(0, maxArtifactFiles))
	a.MaxBytesInline = size(0, maxArtifactInline)
	a.MaxBytesTotal = size(a.MaxBytesInline, maxArtifactTotal)
	a.Dir = pick("", "/var/tmp/bridge-artifacts", "/srv/a b/\"q\"")
	a.ByReference = "large"
	if a.Dir != "" {
		a.ByReference = pick("large", "all")
	}
	a.MaxBytesStored = size(minArtifactStored, maxArtifactStored)
	a.MaxBytesKept = size(a.MaxBytesStored, math.MaxInt64)
	a.Expiry = time.Duration(between(int64(minArtifactExpiry), int64(maxArtifactExpiry)))
	if rng.Intn(2) == 0 {
		a.Expiry = a.Expiry.Round(time.Minute)
	}

	p.Audit.File = pick("", "stderr", "/var/log/bridge/audit.jsonl", "/tmp/a b/\"q\".log")

	sn := &p.Snapshots
	sn.Enabled = rng.Intn(2) == 0
	sn.Dir = pick("", "/var/tmp/bridge-snapshots", "/srv/s n/\"q\"")
	sn.MaxCount = int(between(1, maxSnapshotsCount))
	sn.MaxBytes = size(minSnapshotBytes, maxSnapshotBytes)
	sn.TTL = time.Duration(between(int64(minSnapshotTTL), int64(maxSnapshotTTL)))

	h := &p.HTTP
	h.MaxSessions = int(between(1, maxHTTPSessions))
	h.MaxSessionsPerClient = int(between(1, int64(h.MaxSessions)))
	h.SessionIdleTimeout = time.Duration(between(int64(minHTTPSessionIdle), int64(maxHTTPSessionIdle)))
	h.SessionMinIdle = time.Duration(between(int64(minHTTPSessionMinIdle), int64(h.SessionIdleTimeout)))
	return p
}
