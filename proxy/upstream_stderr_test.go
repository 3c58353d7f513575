package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// shServer is a stdio entry that runs script with sh, and SECRET in its
// environment.
func shServer(name, script string) ServerConfig {
	return ServerConfig{Name: name, Type: TypeStdio, Command: "/bin/sh", Args: []string{"-c", script},
		Env: map[string]string{"SECRET": "s3cr3t-value"}}
}

// TestStartupExitShowsStderr: a server that exits before it answers
// initialize is reported with its exit status and the last lines it wrote
// to stderr, its env's secrets redacted, in the error the code gets and in
// one warning in the log.
func TestStartupExitShowsStderr(t *testing.T) {
	gh := shServer("gh", `echo "Error: GITHUB_TOKEN is not set" >&2; echo "token was $SECRET" >&2; exit 1`)
	_, c, logs := startProxy(t, Options{}, gh)
	_, err := call(t, c, "gh", "x", `{}`)
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != KindUpstream {
		t.Fatalf("call: %v, want an upstream error", err)
	}
	want := `server "gh" is unavailable: it exited during start-up (exit status 1); its stderr ended with:
  Error: GITHUB_TOKEN is not set
  token was <redacted>`
	if pe.Message != want {
		t.Errorf("error:\n%s\nwant:\n%s", pe.Message, want)
	}
	if strings.Contains(logs.String(), "s3cr3t-value") {
		t.Errorf("the secret is in the log:\n%s", logs)
	}
	var warnings []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `"server":"gh"`) ||
		!strings.Contains(warnings[0], `exited during start-up (exit status 1); its stderr ended with:\n  Error: GITHUB_TOKEN is not set`) {
		t.Errorf("want one warning with the server and its stderr; got %q", warnings)
	}
}

func TestStartupFailureMessages(t *testing.T) {
	tests := []struct {
		name, script string
		want         string
	}{
		{"silent exit", `exit 3`, `it exited during start-up (exit status 3), writing nothing to stderr`},
		{"killed", `echo "out of memory" >&2; kill -9 $$`, "it exited during start-up (signal: killed); its stderr ended with:\n  out of memory"},
		{"stderr past the bounds", `i=0; while [ $i -lt 50 ]; do echo "line $i" >&2; i=$((i+1)); done; printf '\033[31mred\033[0m\n' >&2; exit 1`,
			"its stderr ended with:\n  line 41\n  line 42\n  line 43\n  line 44\n  line 45\n  line 46\n  line 47\n  line 48\n  line 49\n  red"},
		{"a child keeps stderr open", `sleep 30 >/dev/null & echo "bye" >&2; exit 2`, "it exited during start-up (exit status 2); its stderr ended with:\n  bye"},
		{"no answer", `echo "waiting for the OAuth callback" >&2; exec sleep 30`,
			"no answer to initialize within 1s; its stderr ended with:\n  waiting for the OAuth callback"},
		{"not an MCP server", `echo "hello" >&2; echo "not json"; exec cat >/dev/null`, "its stderr ended with:\n  hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			timeout := 10 * time.Second
			if strings.HasPrefix(tt.want, "no answer") {
				timeout = time.Second
			}
			_, c, _ := startProxy(t, Options{ConnectTimeout: timeout}, shServer("s", tt.script))
			_, err := call(t, c, "s", "x", `{}`)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}

func TestStderrTailBounds(t *testing.T) {
	var tail stderrTail
	for i := range 100 {
		tail.add(fmt.Sprintf("line %d", i))
	}
	if got := tail.lines(); len(got) != tailLines || got[0] != "line 90" || got[tailLines-1] != "line 99" {
		t.Errorf("after 100 lines: %q", got)
	}
	long := strings.Repeat("é", tailLineBytes) // 2 bytes each
	for range 10 {
		tail.add(long)
	}
	got := tail.lines()
	size := 0
	for _, l := range got {
		size += len(l)
		if len(l) > tailLineBytes || !strings.HasSuffix(l, "é…") {
			t.Errorf("a long line kept as %d bytes ending in %q", len(l), l[len(l)-6:])
		}
	}
	if size > tailBytes || len(got) != tailBytes/tailLineBytes {
		t.Errorf("%d lines of %d bytes kept; want %d lines within %d bytes", len(got), size, tailBytes/tailLineBytes, tailBytes)
	}
	tail.add("   ")
	if n := len(tail.lines()); n != len(got) {
		t.Errorf("a blank line was kept")
	}
}

func TestPlainText(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[1;31mError:\x1b[0m bad\tthing": "Error: bad\tthing",
		"bell\a and nul\x00":                 "bell and nul",
		"bad \xff utf-8":                     "bad \uFFFD utf-8",
		"cut \x1b[":                          "cut ",
	} {
		if got := plainText(in); got != want {
			t.Errorf("plainText(%q) = %q, want %q", in, got, want)
		}
	}
}

// The stderr reader stops at the end of the stream even when the proxy
// never connects (the process did not start).
func TestStartFailureWithoutProcess(t *testing.T) {
	_, c, _ := startProxy(t, Options{}, ServerConfig{Name: "none", Type: TypeStdio, Command: "/nonexistent/server"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	servers, err := c.Servers(ctx)
	if err != nil || len(servers) != 1 || strings.Contains(servers[0].Error, "stderr") || !strings.Contains(servers[0].Error, "nonexistent") {
		t.Fatalf("servers %+v, %v", servers, err)
	}
}
