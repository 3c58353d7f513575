package policy

import (
	"errors"
	"os"
	"reflect"
	"testing"
)

// FuzzParse: Parse never panics; what it refuses it refuses with a
// *ParseError naming the file; what it accepts goes through Format and
// Parse unchanged, and Format of that is the same text.
//
//	go test ./policy -run '^$' -fuzz FuzzParse -fuzztime 60s
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../policy.example.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(Format(Default())))
	f.Add([]byte("version: 1\nsandbox:\n  variant: datascience\n"))
	f.Add([]byte(`version: 1
sandbox:
  engine: docker
  oci_runtime: runsc
  image: "localhost/r:1"
  timeout: 1m30s
  max_timeout: 2h
  memory: 1G
  cpus: 0.25
  pids: 4096
  tmpfs_size: 1048576
  output_limit: 1Mi
  max_concurrent: 1
  queue: 0
  require_enforced_limits: false
tools:
  servers: ["github", "fs-*", "[a-c]?"]
  default: deny
  rules:
    - server: github
      tool: "delete_*"
      action: deny
      reason: "no \"deleting\" \u00e9"
    - annotations: {readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false}
      action: allow
budgets:
  max_calls_per_run: 0
  max_argument_bytes: 1
  max_result_bytes: 8Mi
  call_timeout: 500ms
  rates:
    - rate: 0.5/s
    - server: "github"
      per: server
      rate: 600/m
      burst: 7
audit:
  file: audit.jsonl
`))
	for _, s := range []string{
		"", "version: 1\n", "version: 2\n", "version: 1\n---\nversion: 1\n", "a: &a [x]\nb: *a\n",
		"version: 1\nsandbox:\n  <<: {cpus: 2}\n", "version: !!int 1\n", "version: 1\nsandbox:\n\tcpus: 1\n",
		"version: 1\ntools:\n  rules:\n    - {action: deny, tool: \"[\"}\n", "version: 1\nsandbox: {timeout: 10m}\n",
		"version: 1\nbudgets: {rates: [{rate: 1e9/s}, {rate: .5/h}]}\n", "version: [1\n", "{version: 1, audit: {file: \"../x\"}}\n",
		"version: 1\nsandbox:\n  memory: 9223372036854775807\n  cpus: 1024\n", "version: 1\ntools:\n  servers: []\n",
		"version: 1\nsandbox:\n  image: \"\\u2028\\ufeff\"\n",
		"version: 1\nmounts:\n  - host: /usr/share\n    path: /data/share\n  - {host: /usr/lib}\n",
		"version: 1\nmounts: [{host: /proc}, {host: ~/x, path: /data/../etc}]\n",
		"version: 1\nartifacts: {max_files: 3, dir: /var/tmp/bridge-art, by_reference: all, max_bytes_inline: 0, max_bytes_total: 12Mi, expiry: 2h}\n",
		"version: 1\nsnapshots: {enabled: false, dir: ~/snaps, max_count: 1000, max_bytes: 1Ti, ttl: 1m}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.yaml")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Problems) == 0 || p != nil {
				t.Fatalf("error %T %v with policy %v", err, err, p)
			}
			for _, pr := range pe.Problems {
				if pr.File != "fuzz.yaml" || pr.Message == "" || pr.Line < 0 || pr.Column < 0 {
					t.Fatalf("bad problem %+v", pr)
				}
			}
			return
		}
		out := Format(p)
		q, err := Parse([]byte(out), "fuzz.yaml")
		if err != nil {
			t.Fatalf("Parse(Format(p)): %v\ninput:\n%q\nFormat(p):\n%s", err, data, out)
		}
		if !reflect.DeepEqual(normalized(q), normalized(p)) {
			t.Fatalf("Parse(Format(p)) != p\ninput:\n%q\nFormat(p):\n%s\np: %#v\nq: %#v", data, out, p, q)
		}
		if again := Format(q); again != out {
			t.Fatalf("Format not stable:\n%s\n---\n%s", out, again)
		}
	})
}
