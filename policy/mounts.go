package policy

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/paths"
	"github.com/bridge-mcp/bridge/internal/units"
)

// DataDir is the folder of the container under which every mount appears.
const DataDir = paths.DataDir

// MaxMounts is how many mounts a policy may list.
const MaxMounts = 64

// Mount is a host folder every run's container gets, read-only, nosuid,
// nodev and noexec, under DataDir.
type Mount struct {
	// Host is the folder on the host: absolute, symlinks resolved. The
	// file may give it as ~/...; it must exist and be a folder.
	Host string
	// Path is where the code sees it: under DataDir, DataDir/<the last
	// element of host as written> by default.
	Path string

	// Line and Column locate the mount in its file (0 when not read from
	// one).
	Line, Column int
}

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
	Expiry         time.Duration // how long stored files live and are listed; 1h (1m to 720h)
}

// Bounds of the artifacts keys.
const (
	maxArtifactFiles  = 1000
	maxArtifactInline = 8 << 20
	maxArtifactTotal  = 12 << 20
	minArtifactStored = 1 << 20
	maxArtifactStored = 64 << 30
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
		Expiry:         time.Hour,
	}
}

var (
	mountKeys     = []string{"host", "path"}
	artifactsKeys = []string{"max_files", "max_bytes_inline", "max_bytes_total", "dir", "by_reference", "max_bytes_stored", "max_bytes_kept", "expiry"}
)

// mounts reads the list of mounts, then checks them against each other.
func (p *parser) mounts(k, v *yaml.Node, out *[]Mount) {
	type read struct {
		m        Mount
		pathNode *yaml.Node
	}
	var all []read
	p.items(k, v, "mounts", "a list of mounts, e.g. [{host: /srv/data}]", func(item *yaml.Node, name string) {
		if m, at, ok := p.mount(item, name); ok {
			all = append(all, read{m, at})
		}
	})
	if v.Kind == yaml.SequenceNode && len(v.Content) > MaxMounts {
		p.errorf(v.Content[MaxMounts], "mounts: %d mounts; a policy may list at most %d: mount a folder that holds them", len(v.Content), MaxMounts)
		return
	}
	ok := true
	for i, a := range all {
		for _, b := range all[:i] {
			switch {
			case a.m.Path == b.m.Path:
				p.errorf(a.pathNode, "mounts: two mounts at %s (the other at line %d): give one of them another path", a.m.Path, b.m.Line)
				ok = false
			case under(a.m.Path, b.m.Path), under(b.m.Path, a.m.Path):
				outer, inner := b.m.Path, a.m.Path
				if under(b.m.Path, a.m.Path) {
					outer, inner = inner, outer
				}
				p.errorf(a.pathNode, "mounts: %s is inside %s (the mounts at lines %d and %d): mount paths may not nest; give them sibling paths under %s", inner, outer, b.m.Line, a.m.Line, DataDir)
				ok = false
			}
		}
	}
	if ok {
		for _, a := range all {
			*out = append(*out, a.m)
		}
	}
}

// mount reads one mount. It returns the node to point at for problems of
// its path, and whether it is valid.
func (p *parser) mount(n *yaml.Node, name string) (Mount, *yaml.Node, bool) {
	m := Mount{Line: n.Line, Column: n.Column}
	if p.skip(n) {
		return m, n, false
	}
	if n.Kind != yaml.MappingNode {
		want := "a mount (a mapping with host and optionally path, e.g. {host: /srv/data, path: /data/in})"
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			want += fmt.Sprintf("; for a plain folder write {host: %q}", n.Value)
		}
		p.wrong(n, n, name, want)
		return m, n, false
	}
	before := len(p.probs)
	var given string // host as written, ~ expanded and cleaned
	var pathNode *yaml.Node
	seen := p.mapping(n, name, mountKeys, func(key string, k, v *yaml.Node) {
		kname := name + "." + key
		s, ok := p.str(k, v, kname)
		if !ok {
			return
		}
		switch key {
		case "host":
			dir, note, err := hostDir(s, true)
			if err != nil {
				p.errorf(v, "%s: %v", kname, err)
				return
			}
			if why := refusal(dir); why != "" {
				p.errorf(v, "%s: %s%s: the code must not read it; mount only folders of data", kname, why, note)
				return
			}
			if strings.ContainsAny(dir, ",:") {
				p.errorf(v, "%s: %s%s holds a comma or a colon, which engines read as separators in a mount: rename the folder", kname, dir, note)
				return
			}
			given, _ = expandHome(s)
			given = filepath.Clean(given)
			m.Host = dir
		case "path":
			pathNode = v
			if cp, err := containerPath(s); err != nil {
				p.errorf(v, "%s: %v", kname, err)
			} else {
				m.Path = cp
			}
		}
	})
	if seen["host"] == nil {
		p.errorf(n, "%s: missing host: every mount names a host folder, e.g. host: /srv/data", name)
	}
	if pathNode == nil {
		pathNode = n
		if given != "" {
			m.Path = path.Join(DataDir, filepath.Base(given))
			if _, err := containerPath(m.Path); err != nil {
				p.errorf(n, "%s: the default path %s: %v; give a path", name, m.Path, err)
			}
		}
	}
	return m, pathNode, len(p.probs) == before
}

// containerPath checks a mount's path in the container: absolute, under
// DataDir but not DataDir itself, with no ".." and nothing an engine reads
// as a separator. It returns it cleaned.
func containerPath(s string) (string, error) {
	if !strings.HasPrefix(s, "/") {
		return "", fmt.Errorf("%q is not an absolute path: mounts go under %s/, e.g. %s/in", s, DataDir, DataDir)
	}
	for _, e := range strings.Split(s, "/") {
		if e == ".." {
			return "", fmt.Errorf("%q holds \"..\": write the path under %s/ without it", s, DataDir)
		}
	}
	if strings.ContainsAny(s, ",:") {
		return "", fmt.Errorf("%q holds a comma or a colon, which engines read as separators: choose another name", s)
	}
	c := path.Clean(s)
	if c == DataDir {
		return "", fmt.Errorf("%s itself cannot be a mount: mounts go under it, e.g. %s/in", DataDir, DataDir)
	}
	if !strings.HasPrefix(c, DataDir+"/") {
		return "", fmt.Errorf("%s is outside %s/: every mount goes under %s/, e.g. %s/in", c, DataDir, DataDir, DataDir)
	}
	return c, nil
}

// artifacts reads the artifacts section, then its cross-key rules.
func (p *parser) artifacts(k, v *yaml.Node, a *Artifacts) {
	if !p.section(k, v, "artifacts") {
		return
	}
	nodes := map[string]*yaml.Node{}
	okKeys := map[string]bool{}
	p.mapping(v, "artifacts", artifactsKeys, func(key string, k, v *yaml.Node) {
		before := len(p.probs)
		name := "artifacts." + key
		switch key {
		case "max_files":
			a.MaxFiles = int(p.integer(k, v, name, int64(a.MaxFiles), 0, maxArtifactFiles))
		case "max_bytes_inline":
			a.MaxBytesInline = p.size(k, v, name, a.MaxBytesInline, 0, maxArtifactInline)
		case "max_bytes_total":
			a.MaxBytesTotal = p.size(k, v, name, a.MaxBytesTotal, 0, maxArtifactTotal)
		case "dir":
			s, ok := p.str(k, v, name)
			if !ok || s == "" {
				break
			}
			dir, note, err := hostDir(s, false)
			if err != nil {
				p.errorf(v, "%s: %v", name, err)
				break
			}
			if why := refusal(dir); why != "" {
				p.errorf(v, "%s: %s%s: give the bridge a folder of its own for the files, e.g. ~/.local/state/bridge/artifacts", name, why, note)
				break
			}
			a.Dir = dir
		case "by_reference":
			if s, ok := p.enum(k, v, name, []string{artifactsLarge, artifactsAll}); ok {
				a.ByReference = s
			}
		case "max_bytes_stored":
			a.MaxBytesStored = p.size(k, v, name, a.MaxBytesStored, minArtifactStored, maxArtifactStored)
		case "max_bytes_kept":
			a.MaxBytesKept = p.size(k, v, name, a.MaxBytesKept, minArtifactStored, math.MaxInt64)
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
	})
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

// Readable says whether the code can read m's folder: the container's user
// (uid 65534, and under rootless Podman a uid of the user's subordinate
// range) reads host files through their permission bits for others. It
// returns "" when the folder and what it holds at its top can be read, else
// what is wrong and the command that fixes it.
func (m Mount) Readable() string {
	fi, err := os.Stat(m.Host)
	if err != nil {
		return fmt.Sprintf("%s: %v", m.Host, err)
	}
	if !fi.IsDir() {
		return fmt.Sprintf("%s is not a folder", m.Host)
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return fmt.Sprintf("%s is mode %04o: the sandbox's user cannot list or enter it (it reads through the permissions for others): `chmod o+rx %s` (and `chmod -R o+rX %s` for what it holds)",
			m.Host, fi.Mode().Perm(), m.Host, m.Host)
	}
	f, err := os.Open(m.Host)
	if err != nil {
		return fmt.Sprintf("%s: %v", m.Host, err)
	}
	defer f.Close()
	entries, _ := f.ReadDir(1000)
	var hidden []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.Mode()&os.ModeSymlink != 0 {
			continue
		}
		need := os.FileMode(0o004)
		if info.IsDir() {
			need = 0o005
		}
		if info.Mode().Perm()&need != need {
			hidden = append(hidden, e.Name())
		}
	}
	if len(hidden) > 0 {
		list := strings.Join(hidden[:min(3, len(hidden))], ", ")
		if len(hidden) > 3 {
			list += fmt.Sprintf(" and %d more", len(hidden)-3)
		}
		return fmt.Sprintf("%s holds what the sandbox's user cannot read (%s): `chmod -R o+rX %s`", m.Host, list, m.Host)
	}
	return ""
}
