package transport

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Principals maps bearer tokens to the principals they name, from a file
// the operator keeps (HTTPOptions.Principals): several clients of one
// bridge, each its own owner of sessions, snapshots and files. A line is
// `PRINCIPAL TOKEN` or `PRINCIPAL sha256:HEX` (the token's SHA-256, so
// that the file need not hold the secret); `#` starts a comment. Reload
// reads the file again when it changed; a file that does not parse
// leaves the tokens as they were. It is safe for concurrent use.
type Principals struct {
	path string

	mu      sync.RWMutex
	entries []principalToken
	mtime   time.Time
	size    int64
}

// principalToken is one line of the file: a principal and its token's
// digest.
type principalToken struct {
	principal string
	digest    [sha256.Size]byte
}

// principalName is what a principal may be called: what a session name
// may be, so that it can key folders and logs.
var principalName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// maxPrincipalsFile bounds the file: thousands of lines.
const maxPrincipalsFile = 1 << 20

// LoadPrincipals reads the principals file at path.
func LoadPrincipals(path string) (*Principals, error) {
	p := &Principals{path: path}
	if _, err := p.Reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Reload reads the file again if its time or size changed, and reports
// whether it did. On an error the tokens stay as they were.
func (p *Principals) Reload() (bool, error) {
	fi, err := os.Stat(p.path)
	if err != nil {
		return false, fmt.Errorf("principals file: %w", err)
	}
	p.mu.RLock()
	same := fi.ModTime().Equal(p.mtime) && fi.Size() == p.size && p.entries != nil
	p.mu.RUnlock()
	if same {
		return false, nil
	}
	if fi.Size() > maxPrincipalsFile {
		return false, fmt.Errorf("principals file %s is %d bytes, over the %d allowed", p.path, fi.Size(), maxPrincipalsFile)
	}
	b, err := os.ReadFile(p.path)
	if err != nil {
		return false, fmt.Errorf("principals file: %w", err)
	}
	entries, err := parsePrincipals(b)
	if err != nil {
		return false, fmt.Errorf("principals file %s: %w", p.path, err)
	}
	p.mu.Lock()
	p.entries, p.mtime, p.size = entries, fi.ModTime(), fi.Size()
	p.mu.Unlock()
	return true, nil
}

// parsePrincipals parses the file's lines; a line that is not
// `PRINCIPAL TOKEN` or `PRINCIPAL sha256:HEX`, a principal's name that is
// not one, and a token given twice are errors naming the line.
func parsePrincipals(b []byte) ([]principalToken, error) {
	entries := []principalToken{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxPrincipalsFile)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want `PRINCIPAL TOKEN` or `PRINCIPAL sha256:HEX`, got %d fields", n, len(f))
		}
		if !principalName.MatchString(f[0]) {
			return nil, fmt.Errorf("line %d: %q is not a principal's name: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", n, f[0])
		}
		e := principalToken{principal: f[0]}
		if h, ok := strings.CutPrefix(f[1], "sha256:"); ok {
			d, err := hex.DecodeString(h)
			if err != nil || len(d) != sha256.Size {
				return nil, fmt.Errorf("line %d: sha256: must be followed by the token's SHA-256 in 64 hex digits (`printf %%s TOKEN | sha256sum`)", n)
			}
			copy(e.digest[:], d)
		} else {
			if err := checkToken(f[1]); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if len(f[1]) < 16 {
				return nil, fmt.Errorf("line %d: the token of %s is %d characters; use at least 32 random ones", n, f[0], len(f[1]))
			}
			e.digest = sha256.Sum256([]byte(f[1]))
		}
		if prev, ok := seen[e.digest]; ok {
			return nil, fmt.Errorf("line %d: the same token as line %d: each token names one principal", n, prev)
		}
		seen[e.digest] = n
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, errors.New("no `PRINCIPAL TOKEN` line: a file of principals must give at least one")
	}
	return entries, nil
}

// Lookup is the principal token names, or false. It compares the token's
// digest with every entry's in constant time, so that neither which
// entry matched nor how much of it leaks.
func (p *Principals) Lookup(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	p.mu.RLock()
	defer p.mu.RUnlock()
	found := ""
	for _, e := range p.entries {
		if subtle.ConstantTimeCompare(sum[:], e.digest[:]) == 1 {
			found = e.principal
		}
	}
	return found, found != ""
}

// Count is how many tokens the file gives.
func (p *Principals) Count() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.entries)
}
