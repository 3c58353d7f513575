package policy

import (
	"fmt"
	"math"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/units"
)

var artifactsKeys = []string{"max_files", "max_bytes_inline", "max_bytes_total", "dir", "by_reference", "max_bytes_stored", "max_bytes_kept", "max_bytes_read", "expiry"}

// Artifacts bound the files a run hands back (from /tmp/outputs), inline
// in its result or by reference to a host folder.
type Artifacts struct {
	MaxFiles       int           // files returned per run, inline or by reference; 20 (0 to 1000; 0 returns none)
	MaxBytesInline int64         // the largest file put inline in the result; 1Mi (0 to 8Mi)
	MaxBytesTotal  int64         // all files inline in one result together; 4Mi (0 to 12Mi), at least MaxBytesInline
	Dir            string        // host folder for files by reference; "" = none (absolute, symlinks resolved; the bridge creates it 0700)
	ByReference    string        // "large" (files over MaxBytesInline) or "all"; default "large"; "all" needs Dir
	MaxBytesStored int64         // bytes one run may store in Dir; 256Mi (1Mi to 64Gi)
	MaxBytesKept   int64         // bytes the whole Dir may hold, the oldest runs' files going first; 1Gi, at least MaxBytesStored
	MaxBytesRead   int64         // the largest stored file one resources/read returns (whole, base64); 8Mi (64Ki to 256Mi)
	Expiry         time.Duration // how long stored files live and are listed; 1h (1m to 720h)
}

// Bounds of the artifacts keys.
const (
	maxArtifactFiles  = 1000
	maxArtifactInline = 8 << 20
	maxArtifactTotal  = 12 << 20
	minArtifactStored = 1 << 20
	maxArtifactStored = 64 << 30
	minArtifactRead   = 64 << 10
	maxArtifactRead   = 256 << 20
	minArtifactExpiry = time.Minute
	maxArtifactExpiry = 30 * 24 * time.Hour
	artifactsAll      = "all"
	artifactsLarge    = "large"
)

func defaultArtifacts() Artifacts {
	return Artifacts{
		MaxFiles:       20,
		MaxBytesInline: 1 << 20,
		MaxBytesTotal:  4 << 20,
		ByReference:    artifactsLarge,
		MaxBytesStored: 256 << 20,
		MaxBytesKept:   1 << 30,
		MaxBytesRead:   8 << 20,
		Expiry:         time.Hour,
	}
}

// artifacts reads the artifacts section, then its cross-key rules.
func (p *parser) artifacts(k, v *yaml.Node, a *Artifacts) {
	nodes := map[string]*yaml.Node{}
	okKeys := map[string]bool{}
	if !p.keys(k, v, "artifacts", artifactsKeys, func(key, name string, k, v *yaml.Node) {
		before := len(p.probs)
		switch key {
		case "max_files":
			a.MaxFiles = int(p.integer(k, v, name, int64(a.MaxFiles), 0, maxArtifactFiles))
		case "max_bytes_inline":
			a.MaxBytesInline = p.size(k, v, name, a.MaxBytesInline, 0, maxArtifactInline)
		case "max_bytes_total":
			a.MaxBytesTotal = p.size(k, v, name, a.MaxBytesTotal, 0, maxArtifactTotal)
		case "dir":
			if dir, ok := p.ownFolder(k, v, name, "the files", "~/.local/state/bridge/artifacts"); ok {
				a.Dir = dir
			}
		case "by_reference":
			if s, ok := p.enum(k, v, name, []string{artifactsLarge, artifactsAll}); ok {
				a.ByReference = s
			}
		case "max_bytes_stored":
			a.MaxBytesStored = p.size(k, v, name, a.MaxBytesStored, minArtifactStored, maxArtifactStored)
		case "max_bytes_kept":
			a.MaxBytesKept = p.size(k, v, name, a.MaxBytesKept, minArtifactStored, math.MaxInt64)
		case "max_bytes_read":
			a.MaxBytesRead = p.size(k, v, name, a.MaxBytesRead, minArtifactRead, maxArtifactRead)
		case "expiry":
			if d, ok := p.duration(k, v, name, a.Expiry); ok {
				if d < minArtifactExpiry || d > maxArtifactExpiry {
					p.errorf(v, "%s: %s is out of range: it must be %s .. %s (30 days)", name, v.Value, units.FormatDuration(minArtifactExpiry), units.FormatDuration(maxArtifactExpiry))
				} else {
					a.Expiry = d
				}
			}
		}
		nodes[key], okKeys[key] = v, len(p.probs) == before
	}) {
		return
	}
	// A rule between two keys is checked when both read well; it is
	// reported at the key the file sets (the later one when it sets both).
	pair := func(lo, hi string, broken bool, msg string) {
		if !broken || (nodes[lo] != nil && !okKeys[lo]) || (nodes[hi] != nil && !okKeys[hi]) {
			return
		}
		at := nodes[hi]
		if at == nil || (nodes[lo] != nil && nodes[lo].Line > at.Line) {
			at = nodes[lo]
		}
		p.errorf(at, "%s", msg)
	}
	pair("max_bytes_inline", "max_bytes_total", a.MaxBytesTotal < a.MaxBytesInline,
		fmt.Sprintf("artifacts.max_bytes_total (%s) is less than artifacts.max_bytes_inline (%s): the inline files of a result together must fit the largest one; raise max_bytes_total or lower max_bytes_inline",
			units.FormatSize(a.MaxBytesTotal), units.FormatSize(a.MaxBytesInline)))
	pair("max_bytes_stored", "max_bytes_kept", a.MaxBytesKept < a.MaxBytesStored,
		fmt.Sprintf("artifacts.max_bytes_kept (%s) is less than artifacts.max_bytes_stored (%s): the folder must hold at least one run's files; raise max_bytes_kept or lower max_bytes_stored",
			units.FormatSize(a.MaxBytesKept), units.FormatSize(a.MaxBytesStored)))
	if a.ByReference == artifactsAll && a.Dir == "" && okKeys["by_reference"] && (nodes["dir"] == nil || okKeys["dir"]) {
		p.errorf(nodes["by_reference"], "artifacts.by_reference: all hands every file back by reference, which needs a folder to keep them in: set artifacts.dir, or use large")
	}
}
