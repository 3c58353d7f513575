package transport

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

const (
	aliceToken = "alice-0123456789abcdef0123456789abcdef"
	bobToken   = "bob-0123456789abcdef0123456789abcdef01"
)

func writePrincipals(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPrincipalsLookup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "principals")
	sum := sha256.Sum256([]byte(bobToken))
	writePrincipals(t, path, "# the team\nalice "+aliceToken+"  # her laptop\n\nbob sha256:"+hex.EncodeToString(sum[:])+"\n")
	p, err := LoadPrincipals(path)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{aliceToken: "alice", bobToken: "bob", "sha256:" + hex.EncodeToString(sum[:]): "", "": "", aliceToken + "x": ""} {
		if got, ok := p.Lookup(token); got != want || ok != (want != "") {
			t.Errorf("Lookup(%q) = %q, %v; want %q", token, got, ok, want)
		}
	}
	if p.Count() != 2 {
		t.Errorf("Count %d", p.Count())
	}
}

func TestPrincipalsRefused(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"", "at least one"},
		{"# only a comment\n", "at least one"},
		{"alice\n", "line 1: want `PRINCIPAL TOKEN`"},
		{"alice " + aliceToken + " extra\n", "got 3 fields"},
		{"../alice " + aliceToken + "\n", "is not a principal's name"},
		{"alice short\n", "use at least 32 random ones"},
		{"alice sha256:abcd\n", "64 hex digits"},
		{"alice " + aliceToken + "\nbob " + aliceToken + "\n", "line 2: the same token as line 1"},
	} {
		path := filepath.Join(t.TempDir(), "principals")
		writePrincipals(t, path, c.text)
		if _, err := LoadPrincipals(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.text, err, c.want)
		}
	}
	if _, err := LoadPrincipals(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file loaded")
	}
}

// Reload takes a changed file, and keeps the tokens of the last good one
// when the new one does not parse.
func TestPrincipalsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "principals")
	writePrincipals(t, path, "alice "+aliceToken+"\n")
	p, err := LoadPrincipals(path)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Reload(); changed || err != nil {
		t.Fatalf("an unchanged file reloaded: %v %v", changed, err)
	}
	writePrincipals(t, path, "bob "+bobToken+"\n")
	future := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Reload(); !changed || err != nil {
		t.Fatalf("a changed file: %v %v", changed, err)
	}
	if _, ok := p.Lookup(aliceToken); ok {
		t.Error("alice's token still works after it was removed")
	}
	if got, _ := p.Lookup(bobToken); got != "bob" {
		t.Errorf("bob's token names %q", got)
	}
	writePrincipals(t, path, "bob\n")
	later := future.Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	if got, _ := p.Lookup(bobToken); got != "bob" {
		t.Errorf("after a broken reload bob's token names %q, want the last good file's", got)
	}
}

// principalAuth names who calls by the token: a principal's, the
// server's own (local), none on loopback (local, no TokenInfo); another
// token is refused.
func TestPrincipalAuth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "principals")
	writePrincipals(t, path, "alice "+aliceToken+"\n")
	p, err := LoadPrincipals(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := func(w http.ResponseWriter, r *http.Request) {
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
			io.WriteString(w, ti.UserID)
			return
		}
		io.WriteString(w, "-")
	}
	for _, c := range []struct {
		server, sent string
		code         int
		who          string
	}{
		{"server-token-0123456789abcdef0123", "alice-0123456789abcdef0123456789abcdef", 200, "alice"},
		{"server-token-0123456789abcdef0123", "server-token-0123456789abcdef0123", 200, "local"},
		{"server-token-0123456789abcdef0123", "", 401, ""},
		{"server-token-0123456789abcdef0123", "mallory-0123456789abcdef0123456789", 401, ""},
		{"", "", 200, "-"},
		{"", aliceToken, 200, "alice"},
		{"", "mallory-0123456789abcdef0123456789", 401, ""},
	} {
		h := principalAuth(c.server, p)(http.HandlerFunc(seen))
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if c.sent != "" {
			r.Header.Set("Authorization", "Bearer "+c.sent)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || (c.code == 200 && w.Body.String() != c.who) {
			t.Errorf("server token %q, sent %q: %d %q; want %d %q", c.server, c.sent, w.Code, w.Body.String(), c.code, c.who)
		}
	}
}
