package policy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/paths"
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

var mountKeys = []string{"host", "path"}

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
			if why := specialsRefusal(dir, MountScanEntries); why != "" {
				p.errorf(v, "%s: %s", kname, why)
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

// MountScanEntries is how many entries of a mount's folder are looked at
// for FIFOs when the policy is read.
const MountScanEntries = 100_000

// specialsRefusal says why dir cannot be mounted, "" when it can: it holds
// a FIFO, which a read-only mount does not stop the code from opening for
// writing (the runner's Landlock rule does, where the kernel has Landlock;
// this refuses it everywhere). Unix sockets are allowed: the code can make
// no unix socket to connect with (docs/security.md).
func specialsRefusal(dir string, maxEntries int) string {
	s := paths.Special(dir, maxEntries)
	if s.NFIFOs == 0 {
		return ""
	}
	more := ""
	if s.NFIFOs > len(s.FIFOs) {
		more = fmt.Sprintf(" and %d more", s.NFIFOs-len(s.FIFOs))
	}
	return fmt.Sprintf("%s holds %d FIFO(s) (%s%s): code could write through one to whatever host process reads it, "+
		"which a read-only mount does not stop; remove them, or mount a folder without them", dir, s.NFIFOs, strings.Join(s.FIFOs, ", "), more)
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
