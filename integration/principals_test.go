package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connectAs connects an MCP client to the bridge at addr with token ("":
// none).
func connectAs(t *testing.T, addr, token string) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}
	if token != "" {
		tr.HTTPClient = &http.Client{Transport: bearer(token)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
		_, err = cs.ListTools(ctx, nil)
	}
	return cs, err
}

// principalsFile writes a --principals file of lines.
func principalsFile(t *testing.T, lines ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "principals")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestPrincipals: over HTTP with --principals, each token names who
// calls: a snapshot belongs to the principal that saved it, another
// principal cannot restore it (as if it were never saved), the local
// user (no token on loopback) is a principal of its own, a token not in
// the file is refused, and a token removed from the file stops working.
func TestPrincipals(t *testing.T) {
	forEngines(t, aboveEngine("who owns a snapshot"), func(t *testing.T, e *engine) {
		pol, _ := snapshotsPolicy(t, e)
		file := filepath.Join(t.TempDir(), "principals")
		const alice, bob = "alice-0123456789abcdef0123456789abcdef", "bob-0123456789abcdef0123456789abcdef01"
		if err := os.WriteFile(file, []byte("alice "+alice+"\nbob "+bob+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args, _ := serveArgs(e)
		addr, _ := startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--policy", pol, "--principals", file))

		a, err := connectAs(t, addr, alice)
		if err != nil {
			t.Fatal(err)
		}
		b, err := connectAs(t, addr, bob)
		if err != nil {
			t.Fatal(err)
		}
		local, err := connectAs(t, addr, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := connectAs(t, addr, "mallory-0123456789abcdef0123456789"); err == nil {
			t.Error("a token not in the file connected")
		}

		if _, out := callWith(t, a, map[string]any{"session": "s", "snapshot": "mine", "code": "open('/tmp/f', 'w').write('alice')"}); out.Snapshot == nil || !out.Snapshot.Saved {
			t.Fatalf("alice's snapshot: %+v (%s)", out.Snapshot, out.Message)
		}
		for name, cs := range map[string]*mcp.ClientSession{"bob": b, "the local user": local} {
			res, out := callWith(t, cs, map[string]any{"session": "t", "restore": "mine", "code": "print(open('/tmp/f').read())"})
			if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message, `there is no snapshot "mine"`) {
				t.Errorf("%s restored alice's snapshot: %q %q", name, out.Status, out.Message)
			}
		}
		if _, out := callWith(t, a, map[string]any{"session": "u", "restore": "mine", "code": "print(open('/tmp/f').read())"}); out.Stdout != "alice\n" {
			t.Errorf("alice's own restore: %q (%s)", out.Stdout, out.Message)
		}

		// Bob's token removed: refused within the file's poll (2 s).
		if err := os.WriteFile(file, []byte("alice "+alice+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		future := time.Now().Add(time.Minute)
		if err := os.Chtimes(file, future, future); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := connectAs(t, addr, bob); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("bob's token still works 20 s after it was removed from the file")
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}
