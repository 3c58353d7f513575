package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/bridge/transport"
)

// --principals is for --http, and a file that does not parse stops serve
// at its start, naming the line.
func TestServePrincipalsMistakes(t *testing.T) {
	if _, errOut, code := runCLI(t, "serve", "--principals", "/nonexistent"); code != 2 || !strings.Contains(errOut, "--principals needs --http") {
		t.Errorf("--principals under stdio: %d %q", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "principals")
	if err := os.WriteFile(bad, []byte("alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "serve", "--http", "127.0.0.1:0", "--principals", bad); code != 2 || !strings.Contains(errOut, "line 1: want `PRINCIPAL TOKEN`") {
		t.Errorf("a broken principals file: %d %q", code, errOut)
	}
}

// The bridge and its HTTP transport name the user without a token alike:
// a session or snapshot made over stdio is the one loopback HTTP finds.
func TestLocalPrincipalIsOne(t *testing.T) {
	if bridge.LocalPrincipal != transport.LocalPrincipal {
		t.Fatalf("bridge says %q, transport says %q", bridge.LocalPrincipal, transport.LocalPrincipal)
	}
}
