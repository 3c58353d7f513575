package policy

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/units"
)

// Setting is a policy key given another way than in the file: a
// command-line flag. Its value is written in the file's grammar ("256Mi",
// "30s", "podman") and read by the same code, with the same bounds.
type Setting struct {
	Key   string // "sandbox.memory"
	Value string // "256Mi"
	Flag  string // what gave it, for messages: "--memory"
}

// Mode is how With applies settings to a policy.
type Mode int

const (
	// Replace sets each key to the setting's value: there is no policy
	// file, and the settings stand in for one.
	Replace Mode = iota
	// Tighten applies settings that make the policy stricter and refuses,
	// naming the key, any that would loosen it: a flag may narrow the
	// operator's file for one invocation, never widen it.
	Tighten
	// Cap is Tighten for a policy that was reloaded: a setting past the
	// new file's value yields to the file instead of being an error.
	Cap
)

// knob is how one key takes a setting: whether a value loosens the
// policy's, and how to copy it.
type knob struct {
	key string
	// looser reports whether want's value loosens have's.
	looser func(have, want *Policy) bool
	// take copies the value from src into dst.
	take func(dst, src *Policy)
	// show is the value as the file would say it.
	show func(p *Policy) string
	// rule says, for docs and errors, what a flag may do.
	rule string
}

// knobs are the keys a Setting may name, in the order With applies them
// (max_timeout before timeout, which must stay within it).
var knobs = []knob{
	{key: "sandbox.engine", rule: "may pick an engine when the policy says auto",
		looser: func(h, w *Policy) bool { return h.Sandbox.Engine != "auto" && w.Sandbox.Engine != h.Sandbox.Engine },
		take:   func(d, s *Policy) { d.Sandbox.Engine = s.Sandbox.Engine },
		show:   func(p *Policy) string { return p.Sandbox.Engine }},
	{key: "sandbox.oci_runtime", rule: "may be runsc, or what the policy says",
		looser: func(h, w *Policy) bool {
			return w.Sandbox.OCIRuntime != "runsc" && w.Sandbox.OCIRuntime != h.Sandbox.OCIRuntime
		},
		take: func(d, s *Policy) { d.Sandbox.OCIRuntime = s.Sandbox.OCIRuntime },
		show: func(p *Policy) string { return p.Sandbox.OCIRuntime }},
	{key: "sandbox.image", rule: "may name an image when the policy leaves it empty",
		looser: func(h, w *Policy) bool { return h.Sandbox.Image != "" && w.Sandbox.Image != h.Sandbox.Image },
		take:   func(d, s *Policy) { d.Sandbox.Image = s.Sandbox.Image },
		show: func(p *Policy) string {
			if p.Sandbox.Image == "" {
				return `""`
			}
			return p.Sandbox.Image
		}},
	{key: "sandbox.variant", rule: "may choose a variant when the policy leaves it slim and sandbox.image empty",
		looser: func(h, w *Policy) bool {
			return w.Sandbox.Variant != h.Sandbox.Variant && (h.Sandbox.Variant != "slim" || h.Sandbox.Image != "")
		},
		take: func(d, s *Policy) { d.Sandbox.Variant = s.Sandbox.Variant },
		show: func(p *Policy) string { return p.Sandbox.Variant }},
	{key: "sandbox.max_timeout", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.MaxTimeout > h.Sandbox.MaxTimeout },
		take:   func(d, s *Policy) { d.Sandbox.MaxTimeout = s.Sandbox.MaxTimeout },
		show:   func(p *Policy) string { return units.FormatDuration(p.Sandbox.MaxTimeout) }},
	{key: "sandbox.timeout", rule: "at most sandbox.max_timeout (timeout is the default, max_timeout the ceiling)",
		// Against the policy being built: max_timeout may have been lowered.
		looser: func(h, w *Policy) bool { return w.Sandbox.Timeout > h.Sandbox.MaxTimeout },
		take:   func(d, s *Policy) { d.Sandbox.Timeout = s.Sandbox.Timeout },
		show:   func(p *Policy) string { return units.FormatDuration(p.Sandbox.Timeout) }},
	{key: "sandbox.memory", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.Memory > h.Sandbox.Memory },
		take:   func(d, s *Policy) { d.Sandbox.Memory = s.Sandbox.Memory },
		show:   func(p *Policy) string { return units.FormatSize(p.Sandbox.Memory) }},
	{key: "sandbox.cpus", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.CPUs > h.Sandbox.CPUs },
		take:   func(d, s *Policy) { d.Sandbox.CPUs = s.Sandbox.CPUs },
		show:   func(p *Policy) string { return formatFloat(p.Sandbox.CPUs) }},
	{key: "sandbox.pids", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.Pids > h.Sandbox.Pids },
		take:   func(d, s *Policy) { d.Sandbox.Pids = s.Sandbox.Pids },
		show:   func(p *Policy) string { return fmt.Sprint(p.Sandbox.Pids) }},
	{key: "sandbox.tmpfs_size", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.TmpfsSize > h.Sandbox.TmpfsSize },
		take:   func(d, s *Policy) { d.Sandbox.TmpfsSize = s.Sandbox.TmpfsSize },
		show:   func(p *Policy) string { return units.FormatSize(p.Sandbox.TmpfsSize) }},
	{key: "sandbox.output_limit", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.OutputLimit > h.Sandbox.OutputLimit },
		take:   func(d, s *Policy) { d.Sandbox.OutputLimit = s.Sandbox.OutputLimit },
		show:   func(p *Policy) string { return units.FormatSize(p.Sandbox.OutputLimit) }},
	{key: "sandbox.max_concurrent", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.MaxConcurrent > h.Sandbox.MaxConcurrent },
		take:   func(d, s *Policy) { d.Sandbox.MaxConcurrent = s.Sandbox.MaxConcurrent },
		show:   func(p *Policy) string { return fmt.Sprint(p.Sandbox.MaxConcurrent) }},
	{key: "sandbox.queue", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Sandbox.Queue > h.Sandbox.Queue },
		take:   func(d, s *Policy) { d.Sandbox.Queue = s.Sandbox.Queue },
		show:   func(p *Policy) string { return fmt.Sprint(p.Sandbox.Queue) }},
	{key: "sandbox.require_enforced_limits", rule: "may be false only where the policy says false",
		looser: func(h, w *Policy) bool { return h.Sandbox.RequireEnforcedLimits && !w.Sandbox.RequireEnforcedLimits },
		take:   func(d, s *Policy) { d.Sandbox.RequireEnforcedLimits = s.Sandbox.RequireEnforcedLimits },
		show:   func(p *Policy) string { return fmt.Sprint(p.Sandbox.RequireEnforcedLimits) }},
	{key: "budgets.call_timeout", rule: "at most the policy's",
		looser: func(h, w *Policy) bool { return w.Budgets.CallTimeout > h.Budgets.CallTimeout },
		take:   func(d, s *Policy) { d.Budgets.CallTimeout = s.Budgets.CallTimeout },
		show:   func(p *Policy) string { return units.FormatDuration(p.Budgets.CallTimeout) }},
}

func knobOf(key string) (knob, bool) {
	for _, k := range knobs {
		if k.key == key {
			return k, true
		}
	}
	return knob{}, false
}

// SettingRules lists each key a Setting may name with what a flag may do
// to it under a policy file (Tighten): the table of docs/policy.md.
func SettingRules() [][2]string {
	out := make([][2]string, len(knobs))
	for i, k := range knobs {
		out[i] = [2]string{k.key, k.rule}
	}
	return out
}

// Value is key's value in p as the file would write it; "" for a key no
// Setting may name.
func (p *Policy) Value(key string) string {
	if k, ok := knobOf(key); ok {
		return k.show(p)
	}
	return ""
}

// CheckSetting reads value as key's, in the file's grammar and bounds: the
// error is the one the file would get, with s.Flag naming it.
func CheckSetting(s Setting) error {
	var p Policy
	return (&p).read(s)
}

// read applies s to p as a file would set it.
func (p *Policy) read(s Setting) error {
	section, key, _ := strings.Cut(s.Key, ".")
	if _, ok := knobOf(s.Key); !ok {
		return fmt.Errorf("%s is not a key a flag may set", s.Key)
	}
	name := s.Flag
	if name == "" {
		name = s.Key
	}
	// A plain YAML scalar, its type resolved as in a file: "30" is a
	// number, "30s" a string, "true" a boolean.
	v := &yaml.Node{Kind: yaml.ScalarNode, Value: s.Value}
	v.Tag = v.ShortTag()
	pr := &parser{}
	switch section {
	case "sandbox":
		pr.sandboxKey(key, name, v, v, &p.Sandbox)
	case "budgets":
		pr.budgetsKey(key, name, v, v, &p.Budgets)
	}
	if len(pr.probs) > 0 {
		return errors.New(pr.probs[0].Message)
	}
	return nil
}

// With returns a copy of p with settings applied as mode says. Under
// Tighten, the error names each setting that would loosen p and the key
// to change in the file instead.
func (p *Policy) With(settings []Setting, mode Mode) (*Policy, error) {
	want := *p
	var errs []string
	for _, s := range settings {
		if err := want.read(s); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	out := *p
	given := map[string]Setting{}
	for _, s := range settings {
		given[s.Key] = s
	}
	// Both name the image to run: which one is meant is not for With to guess.
	if img, ok := given["sandbox.image"]; ok && want.Sandbox.Image != "" {
		if v, ok := given["sandbox.variant"]; ok && want.Sandbox.Variant != "slim" {
			return nil, fmt.Errorf("%s %s and %s %s both name the image to run: give one of them",
				flagOr(given, "sandbox.image"), img.Value, flagOr(given, "sandbox.variant"), v.Value)
		}
	}
	if mode == Replace {
		for _, k := range knobs {
			if _, ok := given[k.key]; ok {
				k.take(&out, &want)
			}
		}
		if out.Sandbox.Timeout > out.Sandbox.MaxTimeout {
			return nil, fmt.Errorf("%s %s is longer than %s %s: a call's default timeout must be within the largest it may ask for",
				flagOr(given, "sandbox.timeout"), units.FormatDuration(out.Sandbox.Timeout),
				flagOr(given, "sandbox.max_timeout"), units.FormatDuration(out.Sandbox.MaxTimeout))
		}
		return &out, nil
	}
	for _, k := range knobs {
		s, ok := given[k.key]
		if !ok {
			continue
		}
		if k.looser(&out, &want) {
			if mode == Tighten {
				errs = append(errs, loosens(p, &out, k, s))
			}
			continue
		}
		k.take(&out, &want)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	// A lower ceiling brings the default timeout down with it.
	out.Sandbox.Timeout = min(out.Sandbox.Timeout, out.Sandbox.MaxTimeout)
	return &out, nil
}

// loosens says that s would loosen the policy p (out is it with the
// settings before s applied).
func loosens(p, out *Policy, k knob, s Setting) string {
	file := p.Source
	if file == "" {
		file = "the policy"
	}
	key, have := k.key, k.show(p)
	if k.key == "sandbox.timeout" {
		key, have = "sandbox.max_timeout", units.FormatDuration(out.Sandbox.MaxTimeout)
	}
	return fmt.Sprintf("%s %s would loosen the policy: %s sets %s: %s, and a flag may only tighten a policy file (%s: %s); change %s in the file, or drop %s",
		s.Flag, s.Value, file, key, have, k.key, k.rule, key, s.Flag)
}

func flagOr(given map[string]Setting, key string) string {
	if s, ok := given[key]; ok && s.Flag != "" {
		return s.Flag
	}
	return key
}
