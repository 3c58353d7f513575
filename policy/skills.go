package policy

import (
	"errors"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

var skillsKeys = []string{"dir", "save", "overwrite", "read_only", "max_count", "max_bytes"}

// Skills are Python modules that runs save (mcp_tools.save_skill) and later
// runs import (from skills import NAME). They live in a host folder; the
// code reaches them only through the relay, never by a mount.
type Skills struct {
	// Dir is the folder that holds them; "" is the default place,
	// $XDG_STATE_HOME/bridge/skills or ~/.local/state/bridge/skills (see
	// Folder).
	Dir string
	// Save lets runs save skills; true by default. Off, runs still list
	// and import the skills there are.
	Save bool
	// Overwrite lets a run replace a skill that exists (save_skill with
	// overwrite=True); false by default: a skill an operator reviewed is
	// not replaced behind their back, only removed (`bridge skills rm`).
	Overwrite bool
	// ReadOnly means the bridge never writes the folder: runs cannot save
	// and `bridge skills rm` refuses. For a folder the deployment ships.
	// It implies Save false.
	ReadOnly bool
	// MaxCount is how many skills the folder may hold; 100 (1 to 10000).
	MaxCount int
	// MaxBytes bounds one skill's source; 64Ki (1Ki to 1Mi).
	MaxBytes int64
}

// Bounds of the skills keys.
const (
	maxSkillsCount = 10000
	minSkillBytes  = 1 << 10
	maxSkillBytes  = 1 << 20
)

func defaultSkills() Skills {
	return Skills{Save: true, MaxCount: 100, MaxBytes: 64 << 10}
}

// CanSave says whether runs may save skills.
func (s Skills) CanSave() bool { return s.Save && !s.ReadOnly }

// Folder is the skills folder: Dir, or the default place under this user's
// state folder.
func (s Skills) Folder() (string, error) {
	if s.Dir != "" {
		return s.Dir, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "bridge", "skills"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return "", errors.New("no folder for skills: this user has no home folder ($HOME is not set); set skills.dir in the policy")
	}
	return filepath.Join(home, ".local", "state", "bridge", "skills"), nil
}

// skills reads the skills section.
func (p *parser) skills(k, v *yaml.Node, s *Skills) {
	var saveNode, roNode *yaml.Node
	if !p.keys(k, v, "skills", skillsKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "dir":
			if dir, ok := p.ownFolder(k, v, name, "the skills", "~/.local/state/bridge/skills"); ok {
				s.Dir = dir
			}
		case "save":
			s.Save = p.boolean(k, v, name, s.Save)
			saveNode = v
		case "overwrite":
			s.Overwrite = p.boolean(k, v, name, s.Overwrite)
		case "read_only":
			s.ReadOnly = p.boolean(k, v, name, s.ReadOnly)
			roNode = v
		case "max_count":
			s.MaxCount = int(p.integer(k, v, name, int64(s.MaxCount), 1, maxSkillsCount))
		case "max_bytes":
			s.MaxBytes = p.size(k, v, name, s.MaxBytes, minSkillBytes, maxSkillBytes)
		}
	}) {
		return
	}
	if s.ReadOnly && s.Save && saveNode != nil && roNode != nil {
		at := saveNode
		if roNode.Line > at.Line {
			at = roNode
		}
		p.errorf(at, "skills.save is true but skills.read_only is true: a read-only folder takes no new skills; drop skills.save, or set it to false")
	}
}
