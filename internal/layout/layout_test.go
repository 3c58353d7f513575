package layout

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/bridge-mcp/bridge"

// engineClients are the import path prefixes of the engines' client
// libraries, by the engine package allowed to link each.
var engineClients = map[string]string{
	"github.com/docker/":     "sandbox/docker",
	"github.com/containers/": "sandbox/podman",
	"k8s.io/":                "sandbox/kubernetes",
}

// pkg is what `go list -json` says of a package, as far as this test needs.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listAll lists the module's packages with their imports and dependencies,
// built as the Makefile builds them (GOFLAGS comes from the environment).
func listAll(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", module+"/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ps []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if len(ps) < 10 {
		t.Fatalf("go list found %d packages: not the module", len(ps))
	}
	return ps
}

// root is the module's folder.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", dir)
	}
	return dir
}

// allowedEngines are the packages that may link an engine client: the
// engine packages (each its own), detection, and what sits above it.
func allowedEngines(rel string) map[string]bool {
	switch {
	case rel == "sandbox/detect", rel == "sandbox/doctor", strings.HasPrefix(rel, "cmd/"), strings.HasPrefix(rel, "integration"):
		return map[string]bool{"sandbox/docker": true, "sandbox/podman": true, "sandbox/kubernetes": true}
	case rel == "sandbox/docker", rel == "sandbox/podman", rel == "sandbox/kubernetes", rel == "sandbox/runsc":
		return map[string]bool{rel: true}
	}
	return nil
}

func TestCoreLinksNoEngine(t *testing.T) {
	for _, p := range listAll(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		ok := allowedEngines(rel)
		switch len(ok) {
		case 0: // the core and all that is not about engines: no client at all
			for _, d := range p.Deps {
				if engine := clientOf(d); engine != "" {
					t.Errorf("%s links %s (the %s engine's client): only that engine's package, sandbox/detect and what wires them may", rel, d, engine)
				}
			}
		case 1: // an engine: its own client, and no other engine's package
			// (Podman's bindings themselves build on Docker's types, so
			// only the engine package's own imports are held to this.)
			for _, imp := range p.Imports {
				if engine := clientOf(imp); engine != "" && !ok[engine] {
					t.Errorf("%s imports %s, the %s engine's client: an engine package imports its own client only", rel, imp, engine)
				}
				if other := strings.TrimPrefix(imp, module+"/"); other != rel && len(allowedEngines(other)) == 1 {
					t.Errorf("%s imports %s: an engine package stands alone", rel, other)
				}
			}
		}
	}
}

// clientOf is the engine package whose client the import path imp belongs
// to, or "".
func clientOf(imp string) string {
	for prefix, engine := range engineClients {
		if strings.HasPrefix(imp, prefix) {
			return engine
		}
	}
	return ""
}

func TestGroundFloorImportsNothingAbove(t *testing.T) {
	for _, p := range listAll(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if !strings.HasPrefix(rel, "internal/") {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !strings.HasPrefix(imp, module+"/internal/") {
				t.Errorf("%s imports %s: internal/ is the ground floor, it imports only the standard library, dependencies and other internal packages", rel, imp)
			}
		}
	}
}

// maxLines bounds a function's length in the packages a newcomer reads
// first.
const maxLines = 100

func TestNoLongFunctions(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	for _, dir := range []string{"bridge", "sandbox", "proxy"} {
		err := filepath.WalkDir(filepath.Join(root(t), dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				n++
				if l := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; l > maxLines {
					rel, _ := filepath.Rel(root(t), path)
					t.Errorf("%s: %s is %d lines: split it into steps of at most %d", rel, fn.Name.Name, l, maxLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 500 {
		t.Fatalf("read %d functions: not the tree", n)
	}
}
