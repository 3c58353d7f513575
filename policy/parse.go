package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/suggest"
	"github.com/bridge-mcp/bridge/internal/units"
)

// MaxFileSize is the largest policy file Parse reads.
const MaxFileSize = 1 << 20

// maxProblems is how many problems a ParseError lists; one more says how
// many were left out.
const maxProblems = 100

// Bounds of the values a policy may set (docs/policy.md lists them).
const ()

// Problem is one thing wrong with a policy file. Line and Column are
// 1-based; Column is 0 when only the line is known (YAML syntax errors) and
// Line is 0 when not even that is.
type Problem struct {
	File         string
	Line, Column int
	Message      string
}

// String is "file:line:col: message" (or "file:line: message", or
// "file: message", for what is known).
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
		if p.Column > 0 {
			b.WriteString(":" + strconv.Itoa(p.Column))
		}
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// ParseError is every problem Parse found in a file, in file order (the
// first 100, then one saying how many more there were).
type ParseError struct {
	Problems []Problem
}

// Error is one problem per line, "file:line:col: message".
func (e *ParseError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Default is the policy in force when there is no file: every default, no
// rules and no rates.
func Default() *Policy {
	return &Policy{
		Sandbox: Sandbox{
			Engine:                "auto",
			OCIRuntime:            "default",
			Image:                 "",
			Variant:               "slim",
			Timeout:               60 * time.Second,
			MaxTimeout:            5 * time.Minute,
			Memory:                512 << 20,
			CPUs:                  1,
			Pids:                  128,
			TmpfsSize:             64 << 20,
			OutputLimit:           64 << 10,
			MaxCodeBytes:          1 << 20,
			MaxRequestBytes:       4 << 20,
			MaxConcurrent:         4,
			Queue:                 16,
			RequireEnforcedLimits: true,
		},
		Pool:      defaultPool(),
		Sessions:  defaultSessions(),
		Snapshots: defaultSnapshots(),
		Tasks:     defaultTasks(),
		Skills:    defaultSkills(),
		Artifacts: defaultArtifacts(),
		Inputs:    defaultInputs(),
		Resources: defaultResources(),
		Tokenize:  defaultTokenize(),
		HTTP:      defaultHTTP(),
		Tools: Tools{
			Servers:      []string{"*"},
			Default:      Allow,
			AskFallback:  Deny,
			AskTimeout:   2 * time.Minute,
			AskRemember:  RememberRun,
			AskMaxPerRun: 10,
			OnChange:     Deny,
		},
		Budgets: Budgets{
			MaxCallsPerRun:   1000,
			MaxArgumentBytes: 1 << 20,
			MaxResultBytes:   8 << 20,
			CallTimeout:      60 * time.Second,
		},
	}
}

// Load reads the policy file at path and parses it.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	p.sum = sha256.Sum256(data)
	return p, nil
}

// Parse reads a policy file strictly: an unknown or duplicate key, a value
// of the wrong type or out of range, an invalid glob, a missing or
// unsupported version, more than one YAML document, anchors, aliases and
// tags are all errors. It returns every problem found as a *ParseError.
// source names the file in errors and in [Policy.Source]; a relative
// audit.file is taken relative to source's directory.
func Parse(data []byte, source string) (*Policy, error) {
	p := &parser{file: source}
	pol := p.parse(data)
	if len(p.probs) > 0 {
		sort.SliceStable(p.probs, func(i, j int) bool {
			a, b := p.probs[i], p.probs[j]
			if a.Line != b.Line {
				return a.Line < b.Line
			}
			return a.Column < b.Column
		})
		if n := len(p.probs); n > maxProblems {
			p.probs = append(p.probs[:maxProblems], Problem{File: source, Message: fmt.Sprintf("and %d more problems", n-maxProblems)})
		}
		return nil, &ParseError{Problems: p.probs}
	}
	pol.Source = source
	return pol, nil
}

// variants are the runner images sandbox.variant may choose (the images
// package's variants: a test in cmd/bridge holds the two together).
var variants = []string{"slim", "datascience"}

var (
	rateRE  = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)/([smh])$`)
	intRE   = regexp.MustCompile(`^[-+]?[0-9]+$`)
	floatRE = regexp.MustCompile(`^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$`)
)

// The keys of each mapping, in the order Format writes them.
var (
	topKeys = []string{"version", "sandbox", "pool", "sessions", "snapshots", "tasks", "skills", "mounts", "artifacts", "inputs", "tools", "resources", "budgets", "tokenize", "audit", "http"}
)

// sectionOf is, for each key of a section, the section: it turns "unknown
// key timeout at the top level" into a hint to move it.
var sectionOf = func() map[string]string {
	m := map[string]string{}
	for _, s := range []struct {
		name string
		keys []string
	}{{"sandbox", sandboxKeys}, {"pool", poolKeys}, {"artifacts", artifactsKeys}, {"inputs", inputsKeys}, {"mounts items", mountKeys}, {"tools", toolsKeys}, {"resources", resourcesKeys}, {"resources.rules items", resourceRuleKeys}, {"budgets", budgetsKeys}, {"audit", auditKeys}, {"tools.rules items", ruleKeys}, {"budgets.rates items", rateKeys}, {"annotations", annotationKeys}, {"tokenize", tokenizeKeys}, {"http", httpKeys}} {
		for _, k := range s.keys {
			if _, ok := m[k]; !ok {
				m[k] = s.name
			}
		}
	}
	return m
}()

type parser struct {
	file  string
	probs []Problem
}

// errorf records a problem at n (nil: at the start of the file).
func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	pr := Problem{File: p.file, Line: 1, Column: 1, Message: fmt.Sprintf(format, args...)}
	if n != nil && n.Line > 0 {
		pr.Line, pr.Column = n.Line, n.Column
	}
	p.probs = append(p.probs, pr)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

// parserErrors are the messages of the YAML parser (as opposed to its
// scanner), whose line numbers the decoder reports 0-based.
var parserErrors = []string{
	"did not find expected <stream-start>", "did not find expected <document start>", "found undefined tag handle",
	"did not find expected node content", "did not find expected '-' indicator", "did not find expected key",
	"did not find expected ',' or ']'", "did not find expected ',' or '}'", "found duplicate %YAML directive",
	"found incompatible YAML document", "found duplicate %TAG directive",
}

// syntax records a YAML syntax error from the decoder. The decoder gives a
// line but no column: Column stays 0.
func (p *parser) syntax(err error, data []byte) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if contains(parserErrors, msg) {
		line++ // 0-based, or absent on the first line
	} else if line == 0 {
		line = 1 // scanner errors on the first line come without one
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 1 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	line = max(1, min(line, len(lines)))
	// A tab in the indentation is the likeliest cause, and the decoder's
	// line for it is often off by one: point at the tab.
	for i := max(1, line-1); i <= min(line+1, len(lines)); i++ {
		l := lines[i-1]
		indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if j := strings.IndexByte(indent, '\t'); j >= 0 && strings.TrimSpace(l) != "" {
			p.probs = append(p.probs, Problem{File: p.file, Line: i, Column: j + 1,
				Message: "invalid YAML: a tab in the indentation (YAML indents with spaces only)"})
			return
		}
	}
	// A glob left unquoted (servers: [*], tool: *_file) reads as an alias.
	if strings.HasPrefix(msg, "did not find expected alphabetic or numeric character") || strings.HasPrefix(msg, "unknown anchor") {
		for i, l := range lines {
			if m := bareStarRE.FindStringSubmatchIndex(stripQuoted(l)); m != nil && !strings.HasPrefix(strings.TrimSpace(l), "#") {
				glob := strings.TrimRight(strings.Fields(l[m[2]:])[0], ",]}")
				p.probs = append(p.probs, Problem{File: p.file, Line: i + 1, Column: m[2] + 1,
					Message: fmt.Sprintf("invalid YAML: an unquoted %s (a bare * starts a YAML alias): quote globs, e.g. %q", glob, glob)})
				return
			}
		}
	}
	p.probs = append(p.probs, Problem{File: p.file, Line: line, Message: "invalid YAML: " + msg})
}

// bareStarRE finds a plain scalar that starts with '*': after a key's
// colon, a list dash, or in a flow list or mapping.
var bareStarRE = regexp.MustCompile(`(?:^|[:\[,{-])\s*(\*)`)

// stripQuoted blanks out quoted strings and comments in a line, keeping
// its length, so that a '*' inside them is not taken for a bare one.
func stripQuoted(l string) string {
	b := []byte(l)
	var q byte
	for i := 0; i < len(b); i++ {
		switch {
		case q != 0:
			if b[i] == q {
				q = 0
			}
			b[i] = ' '
		case b[i] == '"' || b[i] == '\'':
			q = b[i]
		case b[i] == '#' && (i == 0 || b[i-1] == ' '):
			return string(b[:i])
		}
	}
	return string(b)
}

// encoding reports the first byte that is not valid UTF-8 or a character
// YAML does not allow, with its line and column (which the decoder would
// not give). It reports whether data is fine.
func (p *parser) encoding(data []byte) bool {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		var msg string
		switch {
		case r == utf8.RuneError && size <= 1:
			msg = fmt.Sprintf("the file is not valid UTF-8 (byte 0x%02x)", data[i])
		case r == '\n':
			line, col = line+1, 0
		case r == '\t' || r == '\r':
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0 && r != 0x85) || (r >= 0xd800 && r < 0xe000) || r == 0xfffe || r == 0xffff:
			msg = fmt.Sprintf("character %U is not allowed in YAML", r)
		}
		if msg != "" {
			p.probs = append(p.probs, Problem{File: p.file, Line: line, Column: col, Message: msg})
			return false
		}
		i += size
		col++
	}
	return true
}

func (p *parser) parse(data []byte) *Policy {
	pol := Default()
	pol.Resources.Default = "" // unless the file says: tools.default's (below)
	if len(data) > MaxFileSize {
		p.errorf(nil, "the file is %d bytes; a policy file may have at most %d (1 MiB)", len(data), MaxFileSize)
		return pol
	}
	if !p.encoding(data) {
		return pol
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if err != nil && !errors.Is(err, io.EOF) {
		p.syntax(err, data)
		return pol
	}
	var root *yaml.Node
	if err == nil {
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case err == nil:
			at := &next
			if len(next.Content) > 0 {
				at = next.Content[0]
			}
			p.errorf(at, "a second YAML document (after ---): a policy file holds one document")
		case !errors.Is(err, io.EOF):
			p.syntax(err, data)
		}
		if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
			root = doc.Content[0]
		}
	}
	p.scan(root)
	if root == nil || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		p.errorf(root, "missing version: the file must start with \"version: %d\"", Version)
		return pol
	}
	if p.skip(root) {
		return pol
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "the top level must be a mapping of keys (%s), got %s", strings.Join(topKeys, ", "), describe(root))
		return pol
	}
	seen := p.mapping(root, "the top level", topKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "version":
			p.version(k, v)
		case "sandbox":
			p.sandbox(k, v, &pol.Sandbox)
		case "pool":
			p.pool(k, v, &pol.Pool)
		case "sessions":
			p.sessions(k, v, &pol.Sessions)
		case "snapshots":
			p.snapshots(k, v, &pol.Snapshots)
		case "tasks":
			p.tasks(k, v, &pol.Tasks)
		case "skills":
			p.skills(k, v, &pol.Skills)
		case "mounts":
			p.mounts(k, v, &pol.Mounts)
		case "artifacts":
			p.artifacts(k, v, &pol.Artifacts)
		case "inputs":
			p.inputs(k, v, &pol.Inputs)
		case "tools":
			p.tools(k, v, &pol.Tools)
		case "resources":
			p.resources(k, v, &pol.Resources)
		case "budgets":
			p.budgets(k, v, &pol.Budgets)
		case "tokenize":
			p.tokenize(k, v, &pol.Tokenize)
		case "audit":
			p.audit(k, v, &pol.Audit)
		case "http":
			p.http(k, v, &pol.HTTP)
		}
	})
	if pol.Resources.Default == "" {
		pol.Resources.Default = resourcesDefault(pol.Tools.Default)
	}
	if seen["version"] == nil {
		p.errorf(root, "missing version: the file must start with \"version: %d\"", Version)
	}
	if pol.Audit.File != "" && pol.Audit.File != "stderr" && !filepath.IsAbs(pol.Audit.File) && p.file != "" {
		pol.Audit.File = filepath.Join(filepath.Dir(p.file), pol.Audit.File)
	}
	return pol
}

// scan reports every anchor, alias and explicit tag in the tree. They are
// refused: aliases make one line stand for another (errors would point at
// the wrong place) and let a small file expand into a huge one.
func (p *parser) scan(root *yaml.Node) {
	if root == nil {
		return
	}
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch {
		case n.Kind == yaml.AliasNode:
			p.errorf(n, "alias *%s: anchors and aliases are not supported; write the value out", n.Value)
		case n.Anchor != "":
			p.errorf(n, "anchor &%s: anchors and aliases are not supported; write the value out", n.Anchor)
		}
		if n.Style&yaml.TaggedStyle != 0 {
			p.errorf(n, "tag %s: YAML tags are not supported; write the value without it", n.Tag)
		}
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, n.Content[i])
		}
	}
}

// skip reports whether n was already reported by scan and must not be
// interpreted.
func (p *parser) skip(n *yaml.Node) bool {
	return n.Kind == yaml.AliasNode || n.Style&yaml.TaggedStyle != 0
}

// mapping walks the mapping n (what names it in errors), calling f for
// each known key; unknown and duplicate keys are errors. It returns the key
// nodes seen, by name.
func (p *parser) mapping(n *yaml.Node, what string, known []string, f func(key string, k, v *yaml.Node)) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if p.skip(k) {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "a key of %s is %s: keys are plain names", what, describe(k))
			continue
		}
		key := k.Value
		if k.Tag == "!!merge" {
			p.errorf(k, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		if first, dup := seen[key]; dup {
			p.errorf(k, "duplicate key %q in %s (first at line %d)", key, what, first.Line)
			continue
		}
		seen[key] = k
		if !contains(known, key) {
			p.errorf(k, "%s", unknownKey(key, what, known))
			continue
		}
		if p.skip(v) {
			continue
		}
		f(key, k, v)
	}
	return seen
}

func unknownKey(key, what string, known []string) string {
	where := "in " + what
	if what == "the top level" {
		where = "at the top level"
	}
	msg := fmt.Sprintf("unknown key %q %s; known keys: %s", key, where, strings.Join(known, ", "))
	if s := closest(key, known); s != "" {
		return msg + fmt.Sprintf("; did you mean %q?", s)
	}
	if sec, ok := sectionOf[key]; ok && !contains(known, key) {
		return msg + fmt.Sprintf("; %q is a key of %s", key, sec)
	}
	return msg
}

// closest is the known name key most likely is a typo of, or "".
func closest(key string, known []string) string { return suggest.Key(key, known) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// describe names what a node is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	v := n.Value
	if r := []rune(v); len(r) > 40 {
		v = string(r[:40]) + "..."
	}
	switch n.Tag {
	case "!!null":
		return "null (no value)"
	case "!!int", "!!float":
		return "a number " + v
	case "!!bool":
		return "a boolean " + v
	case "!!str":
		return "a string " + strconv.Quote(v)
	case "!!timestamp":
		return "a date " + v
	}
	return "a " + strings.TrimPrefix(n.Tag, "!!") + " " + strconv.Quote(v)
}

// at is where to report a problem with the value v of key k: v, unless v
// is an empty null, which YAML places after the key.
func at(k, v *yaml.Node) *yaml.Node {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" && v.Value == "" {
		return k
	}
	return v
}

// wrong reports that v is not the kind of value the key wants.
func (p *parser) wrong(k, v *yaml.Node, name, want string) {
	msg := fmt.Sprintf("%s: want %s, got %s", name, want, describe(v))
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		msg += "; remove the key to use the default"
	}
	p.errorf(at(k, v), "%s", msg)
}

// keys reads the section k: v, whose name is name: a mapping (or null, an
// empty section) of the known keys, f getting each one's value and its
// full name (name.key); unknown and duplicate keys are errors. It reports
// whether v was a mapping.
func (p *parser) keys(k, v *yaml.Node, name string, known []string, f func(key, kname string, k, v *yaml.Node)) bool {
	if !p.section(k, v, name) {
		return false
	}
	p.mapping(v, name, known, func(key string, k, v *yaml.Node) { f(key, name+"."+key, k, v) })
	return true
}

// entry reads n, an item of a list named name: a mapping (what says of
// which keys, for the error when it is not one) of the known keys, f
// getting each one's value and its full name (name.key). It returns the
// key nodes seen, and whether n was a mapping at all.
func (p *parser) entry(n *yaml.Node, name, what string, known []string, f func(key, kname string, k, v *yaml.Node)) (map[string]*yaml.Node, bool) {
	if p.skip(n) {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		p.wrong(n, n, name, what)
		return nil, false
	}
	return p.mapping(n, name, known, func(key string, k, v *yaml.Node) { f(key, name+"."+key, k, v) }), true
}

// section checks that v is a mapping (or null: an empty section).
func (p *parser) section(k, v *yaml.Node, name string) bool {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return false
	}
	if v.Kind != yaml.MappingNode {
		p.wrong(k, v, name, "a mapping of keys")
		return false
	}
	return true
}

func (p *parser) version(k, v *yaml.Node) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || !intRE.MatchString(v.Value) {
		p.wrong(k, v, "version", fmt.Sprintf("the number %d", Version))
		return
	}
	if n, err := strconv.ParseInt(v.Value, 10, 64); err != nil || n != Version {
		p.errorf(v, "version %s is not supported: this bridge reads version %d", v.Value, Version)
	}
}

// items calls each with every item of the list v (the value of key k) and
// the item's name, name[i]. A null list is an empty one: "rules:" with
// every item commented out.
func (p *parser) items(k, v *yaml.Node, name, what string, each func(item *yaml.Node, name string)) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return
	}
	if v.Kind != yaml.SequenceNode {
		p.wrong(k, v, name, what)
		return
	}
	for i, item := range v.Content {
		each(item, fmt.Sprintf("%s[%d]", name, i))
	}
}

// str reads a string value: quoted, or plain and not a number, boolean or
// null. Control characters and invalid UTF-8 are refused.
func (p *parser) str(k, v *yaml.Node, name string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		want := "a string"
		if v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			want += fmt.Sprintf(" (quote it: %q)", v.Value)
		}
		p.wrong(k, v, name, want)
		return "", false
	}
	if !utf8.ValidString(v.Value) {
		p.errorf(v, "%s: the string is not valid UTF-8", name)
		return "", false
	}
	if i := strings.IndexFunc(v.Value, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v.Value[i:])
		p.errorf(v, "%s: the string holds a control character (%U)", name, r)
		return "", false
	}
	return v.Value, true
}

// enum reads one of choices.
func (p *parser) enum(k, v *yaml.Node, name string, choices []string) (string, bool) {
	want := "one of " + strings.Join(choices, ", ")
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		p.wrong(k, v, name, want)
		return "", false
	}
	if contains(choices, v.Value) {
		return v.Value, true
	}
	msg := fmt.Sprintf("%s: %q is not %s", name, v.Value, want)
	if s := closest(v.Value, choices); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	p.errorf(v, "%s", msg)
	return "", false
}

// glob reads a path.Match pattern.
func (p *parser) glob(k, v *yaml.Node, name string) (string, bool) {
	s, ok := p.str(k, v, name)
	if !ok {
		return "*", false
	}
	if s == "" {
		p.errorf(v, "%s: an empty glob matches nothing; use \"*\" for any name", name)
		return "*", false
	}
	if _, err := path.Match(s, ""); err != nil {
		p.errorf(v, "%s: invalid glob %q: unclosed [ or a \\ at the end (globs use * ? [abc] [a-z] [^a], \\ escapes)", name, s)
		return "*", false
	}
	return s, true
}

// boolean reads true or false.
func (p *parser) boolean(k, v *yaml.Node, name string, def bool) bool {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
		p.wrong(k, v, name, "true or false")
		return def
	}
	b, err := strconv.ParseBool(strings.ToLower(v.Value))
	if err != nil {
		p.wrong(k, v, name, "true or false")
		return def
	}
	return b
}

// integer reads a whole number in [lo, hi].
func (p *parser) integer(k, v *yaml.Node, name string, def, lo, hi int64) int64 {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || !intRE.MatchString(v.Value) {
		p.wrong(k, v, name, "a whole number")
		return def
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil || n < lo || n > hi {
		p.errorf(v, "%s: %s is out of range: %s", name, v.Value, rangeText(strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10), hi == math.MaxInt64))
		return def
	}
	return n
}

func rangeText(lo, hi string, noMax bool) string {
	if noMax {
		return "the minimum is " + lo
	}
	return "it must be " + lo + " .. " + hi
}

// float reads a number in [lo, hi].
func (p *parser) float(k, v *yaml.Node, name string, def, lo, hi float64) float64 {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || !floatRE.MatchString(v.Value) {
		p.wrong(k, v, name, "a number")
		return def
	}
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || math.IsNaN(f) || f < lo || f > hi {
		p.errorf(v, "%s: %s is out of range: it must be %s .. %s", name, v.Value, formatFloat(lo), formatFloat(hi))
		return def
	}
	return f
}

// size reads a byte size in [lo, hi].
func (p *parser) size(k, v *yaml.Node, name string, def, lo, hi int64) int64 {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && v.Tag != "!!int") {
		p.wrong(k, v, name, "a size such as 512Mi")
		return def
	}
	n, err := units.ParseSize(v.Value)
	if err != nil {
		p.errorf(v, "%s: %v", name, err)
		return def
	}
	if n < lo || n > hi {
		p.errorf(v, "%s: %s is out of range: %s", name, v.Value, rangeText(units.FormatSize(lo), units.FormatSize(hi), hi == math.MaxInt64))
		return def
	}
	return n
}

// duration reads a positive Go duration.
func (p *parser) duration(k, v *yaml.Node, name string, def time.Duration) (time.Duration, bool) {
	const want = "a duration such as 30s, 5m or 1h30m"
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		if v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
			p.errorf(v, "%s: want %s, got a number %s: add a unit, e.g. %ss", name, want, v.Value, v.Value)
		} else {
			p.wrong(k, v, name, want)
		}
		return def, false
	}
	d, err := units.ParseDuration(v.Value)
	if err != nil {
		p.errorf(v, "%s: %v", name, err)
		return def, false
	}
	return d, true
}

// durationIn reads a duration between lo and hi; def when it is not one.
func (p *parser) durationIn(k, v *yaml.Node, name string, def, lo, hi time.Duration) time.Duration {
	d, ok := p.duration(k, v, name, def)
	if !ok {
		return def
	}
	if d < lo || d > hi {
		p.errorf(v, "%s: %s is out of range: it must be %s .. %s", name, v.Value, units.FormatDuration(lo), units.FormatDuration(hi))
		return def
	}
	return d
}
