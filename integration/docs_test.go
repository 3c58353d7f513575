package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/bridge-mcp/bridge/policy"
)

// The docs check (TestDocsCommands): every command in a fenced `sh` block of
// README.md and docs/**/*.md runs as a newcomer would run it, or docsRules
// says why it cannot run here. The newcomer has copied policy.example.yaml
// to its default place (~/.config/bridge/policy.yaml, XDG_CONFIG_HOME being
// ~/.config), has bridge on PATH, and works in a copy of the checkout with
// the files the commands name (docsFixture). A command no rule names must
// exit 0; a rule says what else a command is predicted to do, or how a
// server is run for a short life, or why it is not run at all.

// docsKind says what "runs" means for a command.
type docsKind int

const (
	// docsRun runs the command to its end; it must exit with code (0 unless
	// the rule says what the docs predict) within docsTimeout.
	docsRun docsKind = iota
	// docsServeStdio is a server over stdio: with its stdin open it must
	// still be running after docsAliveAfter, and exit 0 on SIGTERM.
	docsServeStdio
	// docsServeHTTP is a server over HTTP: http://addr/healthz must answer
	// 200, and it must exit 0 on SIGTERM.
	docsServeHTTP
	// docsNotRunnable is not run; why says why not.
	docsNotRunnable
)

func (k docsKind) String() string {
	return [...]string{"run", "serve-stdio", "serve-http", "not runnable"}[k]
}

// docsRule says how to treat the commands it matches.
type docsRule struct {
	match  string // the command exactly, or its start with prefix
	prefix bool
	kind   docsKind
	why    string // docsNotRunnable: why it cannot run here; else what the expectation rests on
	code   int    // docsRun: the exit status the docs predict
	output string // docsRun: what the output (stdout and stderr) must contain
	addr   string // docsServeHTTP: the address whose /healthz must answer
	// with is another documented command (a docsServeHTTP one) that this
	// one needs running: it is started first, in the same directory.
	with string
	// npm: the command needs the npm MCP peers (npmPeers: without them the
	// subtest is skipped, or fails with CI=true).
	npm bool
	// files are written to the working directory for this command, over
	// the newcomer's checkout (docsFixture).
	files map[string]string
}

const (
	docsTimeout    = 2 * time.Minute
	docsAliveAfter = 2 * time.Second
	// docsStopWithin: serve and proxy exit within 5 s of SIGTERM (README).
	docsStopWithin = 10 * time.Second
)

// docsRules is every documented command that does not simply run and exit
// 0, and why. The first rule that matches a command decides; a rule that
// decides no command is stale and fails the test.
var docsRules = []docsRule{
	// Not runnable here.
	{match: "make demo", kind: docsNotRunnable,
		why: "runs integration/env/setup.sh as root (installs packages, starts the engines) and `make image` again, under the other tests; this test runs inside `make test`, after those very steps"},
	{match: "make test", kind: docsNotRunnable,
		why: "this test runs inside `make test`: it would recurse"},
	{match: "make build", kind: docsNotRunnable,
		why: "builds in the checkout, not in the newcomer's folder this test runs in: TestNewcomerMakeInstall runs `make install`, which runs it, and checks the version it stamps"},
	{match: "sudo make install", kind: docsNotRunnable,
		why: "would write /usr/local/bin on the test machine: TestNewcomerMakeInstall runs `make install PREFIX=<temp>` and `make uninstall` instead"},
	{match: "make bench", kind: docsNotRunnable,
		why: "runs setup.sh as root, then every benchmark of this package for minutes: it would recurse into this suite"},
	{match: "make bench-table", kind: docsNotRunnable,
		why: "runs setup.sh as root, then TestBenchTable with full counts for minutes an engine: it would recurse into this suite (which runs it with short counts under CI=true)"},
	{match: "go test -run '^$' -bench Run -count 5 ./integration/ > new.txt", kind: docsNotRunnable,
		why: "runs this package's benchmarks from the source tree for minutes: it would recurse into this suite"},
	{match: "go test -run '^$' -bench Variant -count 5 ./integration/ > variants.txt", kind: docsNotRunnable,
		why: "runs this package's benchmarks from the source tree: it would recurse into this suite"},
	{match: "go test -run '^$' -bench 'ProxyCall|DirectCall|ProxyBigResult' -benchmem -count 3 ./proxy/", kind: docsNotRunnable,
		why: "runs from the source tree, not the newcomer's folder this test runs in; `make unit` runs the proxy package's tests, and `make bench` these benchmarks"},
	{match: "go test -run '^$' -bench RelayToolCall -count 3 ./sandbox/", kind: docsNotRunnable,
		why: "runs from the source tree, not the newcomer's folder this test runs in; `make unit` runs the sandbox package's tests, and `make bench` this benchmark"},
	{match: "bridge image build --variant datascience", kind: docsNotRunnable,
		why: "`make image` built it for every engine before this test (TestImageDataScience runs it); here `auto` picks rootful Podman, whose copy came from Docker without a build cache, so this would download and install the data-science packages again (~45 s)"},
	{match: "bridge image build --variant datascience --apt graphviz,python3-networkx --wheels ./wheels", kind: docsNotRunnable,
		why: "needs wheels on disk, and builds an image nothing would remove: TestImageWheels builds a custom image from --apt and wheels it writes, runs it, and removes it"},
	{match: `docker build -t localhost/my-runner:1 --build-arg RUNNER="$(bridge image name --variant datascience)" .`, kind: docsNotRunnable,
		why: "needs the Dockerfile and mylib/ of the example, and would leave an image in Docker's store: TestImageFromRunner builds such an image FROM the runner, runs it as sandbox.image, and removes it"},
	{match: "claude mcp add ", prefix: true, kind: docsNotRunnable,
		why: "Claude Code is not installed in the test environment"},
	{match: "codex mcp add ", prefix: true, kind: docsNotRunnable,
		why: "Codex CLI is not installed in the test environment"},
	{match: "gemini mcp add ", prefix: true, kind: docsNotRunnable,
		why: "Gemini CLI is not installed in the test environment"},
	{match: "BRIDGE_HTTP_TOKEN=... bridge serve --http 0.0.0.0:8808", kind: docsNotRunnable,
		why: "binds every interface of the CI machine; the token is a placeholder (the loopback form runs as serve-http)"},
	{match: "BRIDGE_HTTP_TOKEN=$(openssl rand -hex 32) bridge serve --http 0.0.0.0:8808", kind: docsNotRunnable,
		why: "binds every interface of the CI machine (the loopback form runs as serve-http)"},
	{match: "sudo podman --runtime runsc ", prefix: true, kind: docsNotRunnable,
		why: "integration/env/setup.sh already runs this very service on unix:///run/podman/podman-runsc.sock for the other tests; a second one would take its socket"},

	// Predicted outcomes other than exit 0.
	{match: "bridge policy explain --policy policy.yaml filesystem write_file", code: 1, output: "the notes are read-only",
		why: "exit 1 for deny (docs/policy.md); the README's policy denies write_* on filesystem with that reason"},

	// Servers: started, checked, stopped.
	{match: "bridge serve", kind: docsServeStdio},
	{match: "bridge serve --policy policy.yaml", kind: docsServeStdio},
	// docs/tracing.md: no collector listens; spans that fail to go out are
	// logged, and nothing is exported before a call anyway.
	{match: "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 bridge serve", kind: docsServeStdio},
	{match: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 bridge serve", kind: docsServeStdio},
	{match: "bridge serve --http 127.0.0.1:8808", kind: docsServeHTTP, addr: "127.0.0.1:8808"},
	{match: "bridge proxy --http 127.0.0.1:8809 --servers-config servers.json", kind: docsServeHTTP, addr: "127.0.0.1:8809", npm: true},
	{match: "bridge serve --proxy-url http://127.0.0.1:8809/mcp", kind: docsServeStdio, npm: true,
		with: "bridge proxy --http 127.0.0.1:8809 --servers-config servers.json"},
	{match: "CONTAINER_HOST=unix:///run/podman/podman-runsc.sock bridge serve --policy FILE", kind: docsServeStdio,
		files: map[string]string{"FILE": "version: 1\nsandbox: {oci_runtime: runsc}\n"}},

	// Runs whose script must do what the docs say it may.
	{match: "bridge run --variant datascience plot.py", output: "saved 30",
		why: "the data-science image draws with pandas and matplotlib (docs/images.md)",
		files: map[string]string{"plot.py": "import matplotlib.pyplot as plt\nimport pandas as pd\n" +
			"df = pd.DataFrame({\"x\": range(5), \"y\": [v * v for v in range(5)]})\n" +
			"df.plot(x=\"x\", y=\"y\")\nplt.savefig(\"/tmp/plot.png\")\nprint(\"saved\", df.y.sum())\n"}},
	{match: "bridge run --variant datascience --outputs out plot.py", output: "bridge: kept /tmp/outputs/plot.png as out/plot.png (image/png",
		why:   "--outputs keeps the figure the code saved in /tmp/outputs (README)",
		files: map[string]string{"plot.py": "import matplotlib.pyplot as plt\nplt.plot([0, 1, 4])\nplt.savefig(\"/tmp/outputs/plot.png\")\n"}},
	{match: "bridge run --servers-config servers.json script.py", output: "echo-ok", npm: true,
		why:   "the code may use those MCP servers",
		files: map[string]string{"script.py": "import mcp_tools\nprint(mcp_tools.call(\"everything\", \"echo\", message=\"echo-ok\"))\n"}},
	{match: "npx @modelcontextprotocol/inspector --cli /usr/local/bin/bridge serve --method tools/list", output: `"run_python"`, npm: true},
	{match: "npx @modelcontextprotocol/inspector --cli /usr/local/bin/bridge serve --method tools/call --tool-name run_python --tool-arg 'code=print(21*2)'", output: `"stdout": "42\n"`, npm: true},
}

// docsSubstitutions replace text of a command before it runs; each must
// occur in some command.
var docsSubstitutions = []struct{ old, why string }{
	// docs/clients.md: "the absolute path of the bridge binary (below:
	// /usr/local/bin/bridge; make build puts it in bin/bridge)".
	{"/usr/local/bin/bridge", "the docs' stand-in for the binary's absolute path: the test's bridge"},
}

// docsForbiddenInfo are info strings of shell blocks the check would not
// see: write them as `sh` (or as `text` for a transcript).
var docsForbiddenInfo = map[string]bool{"bash": true, "shell": true, "console": true, "zsh": true, "shell-session": true}

// docsCommand is one command of a fenced sh block.
type docsCommand struct {
	file string // relative to the repository root
	line int
	text string
	alt  bool // from a trailing "# or: CMD" comment
}

// where names the command in messages and as its subtest.
func (c docsCommand) where() string {
	if c.alt {
		return fmt.Sprintf("%s:%d-or", c.file, c.line)
	}
	return fmt.Sprintf("%s:%d", c.file, c.line)
}

// docsRuleFor returns the index of the rule that decides text (-1 for
// none: a plain docsRun that must exit 0) and the rule.
func docsRuleFor(text string) (int, docsRule) {
	for i, r := range docsRules {
		if text == r.match || r.prefix && strings.HasPrefix(text, r.match) {
			return i, r
		}
	}
	return -1, docsRule{kind: docsRun}
}

func TestDocsCommands(t *testing.T) {
	noEngine(t)
	if len(testSuite.engines) == 0 {
		if ci() {
			t.Fatal("no engine under test")
		}
		t.Skip("no engine under test: run `make setup image`")
	}
	if rootless() {
		// The docs are written for the machine `make demo` sets up as root
		// (README: "where you are root"): rootful Podman and Docker. Here
		// only rootless Podman on cgroup v1 runs, which cannot enforce
		// limits, so `bridge run` and `bridge doctor` refuse by design, and
		// --runtime docker has no engine: a second table of expectations
		// would test this environment, not the docs.
		t.Skip("the docs' commands are checked in the rootful run; see the comment")
	}
	root := repoRoot()

	cmds, problems := docsCommands(root)
	for _, p := range problems {
		t.Error(p)
	}
	if len(cmds) == 0 {
		t.Fatal("no command in any fenced sh block of README.md or docs/: the extraction is broken")
	}
	// The tables must match the docs: a rule that decides no command, a
	// command a rule needs running that no doc shows, or a substitution
	// that finds nothing is stale.
	decides := make([]int, len(docsRules))
	for _, c := range cmds {
		if i, _ := docsRuleFor(c.text); i >= 0 {
			decides[i]++
		}
	}
	for i, r := range docsRules {
		if decides[i] == 0 {
			t.Errorf("docsRules[%d] (%s) %q decides no command of the docs any more: remove it or fix it", i, r.kind, r.match)
		}
		if r.with != "" && !slices.ContainsFunc(cmds, func(c docsCommand) bool { return c.text == r.with }) {
			t.Errorf("docsRules[%d] %q needs %q running, which no doc shows any more", i, r.match, r.with)
		}
	}
	for _, s := range docsSubstitutions {
		if !slices.ContainsFunc(cmds, func(c docsCommand) bool { return strings.Contains(c.text, s.old) }) {
			t.Errorf("the substitution of %q (%s) occurs in no command any more", s.old, s.why)
		}
	}

	policyYAML, auditFile, err := docsPolicySnippet(root)
	if err != nil {
		t.Fatal(err)
	}
	if auditFile != "" {
		// The README's policy writes its audit log to an absolute path; as
		// root the commands create it. Leave the machine as it was.
		if _, err := os.Stat(auditFile); errors.Is(err, fs.ErrNotExist) {
			t.Cleanup(func() { os.Remove(auditFile) })
		}
	}
	env := docsEnv(t)

	for _, c := range cmds {
		_, r := docsRuleFor(c.text)
		t.Run(c.where(), func(t *testing.T) {
			t.Logf("%s: %s [%s]", c.where(), c.text, r.kind)
			if r.kind == docsNotRunnable {
				t.Skipf("not runnable here: %s", r.why)
			}
			dir, env := docsFixture(t, root, policyYAML, r, env)
			if r.with != "" {
				_, with := docsRuleFor(r.with)
				t.Cleanup(docsStartHTTP(t, docsCommand{file: c.file, line: c.line, text: r.with}, with, dir, env))
			}
			switch r.kind {
			case docsRun:
				docsCheckRun(t, c, r, dir, env)
			case docsServeStdio:
				docsCheckStdio(t, c, dir, env)
			case docsServeHTTP:
				docsStartHTTP(t, c, r, dir, env)()
			}
		})
	}
}

// docsCommands reads every command of the fenced sh blocks of README.md and
// docs/**/*.md, in file order. problems are blocks the check cannot read.
func docsCommands(root string) ([]docsCommand, []string) {
	files := []string{"README.md"}
	filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	var cmds []docsCommand
	var problems []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, b := range docsFencedBlocks(string(data)) {
			if docsForbiddenInfo[b.info] {
				problems = append(problems, fmt.Sprintf("%s:%d: a fenced block of %q: write shell commands as ```sh so the docs check runs them (a transcript as ```text)", f, b.line, b.info))
			}
			if b.info != "sh" {
				continue
			}
			cs, err := docsShellCommands(b.lines)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %v", f, b.line, err))
			}
			for _, c := range cs {
				cmds = append(cmds, docsCommand{file: f, line: b.line + c.line, text: c.text, alt: c.alt})
			}
		}
	}
	return cmds, problems
}

// docsFencedBlock is a fenced code block of a Markdown file.
type docsFencedBlock struct {
	info  string
	line  int // of the opening fence, 1-based
	lines []string
}

// docsFencedBlocks returns the fenced code blocks of md, with the opening
// fence's indentation (a block in a list item) removed from their lines.
func docsFencedBlocks(md string) []docsFencedBlock {
	var blocks []docsFencedBlock
	var cur *docsFencedBlock
	var fence string
	var indent int
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if cur == nil {
			for _, ch := range []string{"`", "~"} {
				if n := len(trimmed) - len(strings.TrimLeft(trimmed, ch)); n >= 3 {
					fence = strings.Repeat(ch, n)
					indent = len(line) - len(trimmed)
					cur = &docsFencedBlock{info: strings.TrimSpace(trimmed[n:]), line: i + 1}
					break
				}
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.Trim(strings.TrimSpace(trimmed), fence[:1]) == "" {
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		n := min(indent, len(line)-len(trimmed))
		cur.lines = append(cur.lines, line[n:])
	}
	return blocks
}

// docsShellCommand is one command of a block; line counts from the fence (the
// block's first line is 1).
type docsShellCommand struct {
	line int
	text string
	alt  bool
}

// docsShellCommands splits a block into commands: blank lines and full-line
// comments are skipped, a trailing comment is cut, and backslash
// continuations are joined. A trailing comment "# or: CMD" is a command too.
func docsShellCommands(lines []string) ([]docsShellCommand, error) {
	var out []docsShellCommand
	var cur []string
	var alts []docsShellCommand // "or:" commands, after the one they follow
	start := 0
	for i, line := range lines {
		code, comment := docsSplitComment(line)
		if len(cur) == 0 {
			if strings.TrimSpace(code) == "" {
				continue // blank or a full-line comment
			}
			start = i + 1
		}
		code = strings.TrimSpace(code)
		cont := strings.HasSuffix(code, `\`) && !strings.HasSuffix(code, `\\`)
		if cont {
			code = strings.TrimSpace(strings.TrimSuffix(code, `\`))
		}
		if code != "" {
			cur = append(cur, code)
		}
		if alt, ok := strings.CutPrefix(strings.TrimSpace(comment), "or:"); ok && strings.TrimSpace(alt) != "" {
			alts = append(alts, docsShellCommand{line: i + 1, text: strings.TrimSpace(alt), alt: true})
		}
		if !cont {
			out = append(out, docsShellCommand{line: start, text: strings.Join(cur, " ")})
			out = append(out, alts...)
			cur, alts = nil, nil
		}
	}
	if len(cur) > 0 {
		return out, fmt.Errorf("the block ends in a continuation: %q", strings.Join(cur, " "))
	}
	return out, nil
}

// docsSplitComment cuts line at a # that starts a word outside quotes, as the
// shell does, and returns the code and the comment's text after the #.
func docsSplitComment(line string) (code, comment string) {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '\\':
			i++ // an escaped character, also in double quotes
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], line[i+1:]
		}
	}
	return line, ""
}

// docsPolicySnippet returns the README's policy.yaml (its yaml block that
// starts with "version:"), which a newcomer saves as policy.yaml, and the
// absolute audit file it names, if any.
func docsPolicySnippet(root string) (string, string, error) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return "", "", err
	}
	for _, b := range docsFencedBlocks(string(data)) {
		if b.info == "yaml" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "version:") {
			text := strings.Join(b.lines, "\n") + "\n"
			p, err := policy.Parse([]byte(text), "")
			if err != nil {
				return "", "", fmt.Errorf("README.md:%d: the policy snippet: %w", b.line, err)
			}
			audit := p.Audit.File
			if !filepath.IsAbs(audit) {
				audit = ""
			}
			return text, audit, nil
		}
	}
	return "", "", errors.New("README.md shows no policy snippet (a yaml block starting with version:) any more: fix docsPolicySnippet")
}

// docsEnv is a newcomer's environment: a fresh HOME whose
// ~/.config/bridge/policy.yaml is policy.example.yaml (the default place,
// as the policy example says), bridge on PATH, and the engines' and npm
// peers' variables of the test environment.
func docsEnv(t *testing.T) []string {
	t.Helper()
	base := t.TempDir()
	home := filepath.Join(base, "home")
	config := filepath.Join(home, ".config")
	bin := filepath.Join(base, "bin")
	tmp := filepath.Join(base, "tmp")
	for _, d := range []string{filepath.Join(config, "bridge"), bin, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	example, err := os.ReadFile(filepath.Join(repoRoot(), "policy.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(config, "bridge", "policy.yaml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	// Debian's iproute2 has a `bridge` too, in /sbin: ours must come first.
	if err := os.Symlink(testSuite.bridgeBin, filepath.Join(bin, "bridge")); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		// XDG's default, spelled out: the MCP Inspector passes HOME but not
		// XDG_CONFIG_HOME to the server it starts.
		"XDG_CONFIG_HOME=" + config,
		"TMPDIR=" + tmp,
		"LANG=C.UTF-8",
		// The test has no registry: npx takes the npm peers that
		// docsFixture links as ./node_modules, or fails saying so.
		"npm_config_offline=true",
		"npm_config_update_notifier=false",
	}
	// The engines, as the suite reaches them (/run/bridge-test/env).
	for _, k := range []string{"USER", "LOGNAME", "DOCKER_HOST", "CONTAINER_HOST", "XDG_RUNTIME_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// docsFixture returns a working directory like a newcomer's checkout, and
// the environment to run r's command in. The directory has examples/ and
// policy.example.yaml from this tree, servers.json (examples/servers.json:
// the docs' "your servers"), script.py (prints a line), policy.yaml (the
// README's policy), and r.files over them. For a rule that needs the npm
// peers, node_modules links to them (what `npm install` would give npx),
// and BRIDGE_NPM_DIR and BRIDGE_DEMO_DIR are set as `make demo` sets them
// for examples/servers.json.
func docsFixture(t *testing.T, root, policyYAML string, r docsRule, env []string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "examples"), os.DirFS(filepath.Join(root, "examples"))); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "policy.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	servers, err := os.ReadFile(filepath.Join(root, "examples", "servers.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := map[string]string{
		"policy.example.yaml": string(example),
		"servers.json":        string(servers),
		"script.py":           "print('hello from script.py')\n",
		"policy.yaml":         policyYAML,
	}
	maps.Copy(write, r.files)
	for name, text := range write {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env = slices.Clone(env)
	if r.npm {
		npm := npmPeers(t)
		if err := os.Symlink(npm, filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		env = append(env, "BRIDGE_NPM_DIR="+npm, "BRIDGE_DEMO_DIR="+filepath.Join(dir, "examples"))
	}
	return dir, env
}

// docsCmd prepares c to run through bash in dir, in its own process group.
func docsCmd(ctx context.Context, c docsCommand, dir string, env []string) (*exec.Cmd, *syncBuffer) {
	text := c.text
	for _, s := range docsSubstitutions {
		text = strings.ReplaceAll(text, s.old, testSuite.bridgeBin)
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", text)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out // one writer: exec serializes the writes
	return cmd, out
}

func docsCheckRun(t *testing.T, c docsCommand, r docsRule, dir string, env []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), docsTimeout)
	defer cancel()
	cmd, out := docsCmd(ctx, c, dir, env)
	err := cmd.Run()
	code := docsExitCode(cmd, err)
	if ctx.Err() != nil {
		docsFail(t, c, fmt.Sprintf("still running after %v (a server? give it a serve kind in docsRules)", docsTimeout), code, out)
	}
	if code != r.code {
		docsFail(t, c, fmt.Sprintf("exit %d, want %d%s", code, r.code, docsBecause(r.why)), code, out)
	}
	if r.output != "" && !strings.Contains(out.String(), r.output) {
		docsFail(t, c, fmt.Sprintf("the output does not contain %q%s", r.output, docsBecause(r.why)), code, out)
	}
}

func docsBecause(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

// docsCheckStdio starts a stdio server with its stdin open, requires it to
// be running after docsAliveAfter, then stops it with SIGTERM.
func docsCheckStdio(t *testing.T, c docsCommand, dir string, env []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), docsTimeout)
	defer cancel()
	cmd, out := docsCmd(ctx, c, dir, env)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	done := docsStart(t, c, cmd)
	select {
	case err := <-done:
		docsFail(t, c, fmt.Sprintf("exited within %v with stdin open; a stdio server should serve until stdin ends or a signal", docsAliveAfter), docsExitCode(cmd, err), out)
	case <-time.After(docsAliveAfter):
	}
	docsStop(t, c, cmd, done, out)
}

// docsStartHTTP starts an HTTP server, waits until /healthz answers 200,
// and returns a function that stops it with SIGTERM and requires exit 0.
func docsStartHTTP(t *testing.T, c docsCommand, r docsRule, dir string, env []string) func() {
	t.Helper()
	if r.kind != docsServeHTTP || r.addr == "" {
		t.Fatalf("%s: %q is not a serve-http rule with an address", c.where(), c.text)
	}
	if l, err := net.Listen("tcp", r.addr); err != nil {
		t.Fatalf("%s: %s is taken by another process, so %q cannot run here now: %v", c.where(), r.addr, c.text, err)
	} else {
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), docsTimeout)
	t.Cleanup(cancel)
	cmd, out := docsCmd(ctx, c, dir, env)
	done := docsStart(t, c, cmd)
	url := "http://" + r.addr + "/healthz"
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case werr := <-done:
			docsFail(t, c, fmt.Sprintf("exited before %s answered", url), docsExitCode(cmd, werr), out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			docsFail(t, c, fmt.Sprintf("%s did not answer 200 within 30 s: %v", url, err), -1, out)
		}
	}
	return func() {
		t.Helper()
		docsStop(t, c, cmd, done, out)
	}
}

// docsStart starts cmd and returns its Wait's result; the process group is
// killed when the test ends, whatever happened.
func docsStart(t *testing.T, c docsCommand, cmd *exec.Cmd) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: starting %q: %v", c.where(), c.text, err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// docsStop sends SIGTERM to a running server's process group and requires
// it to exit 0 within docsStopWithin.
func docsStop(t *testing.T, c docsCommand, cmd *exec.Cmd, done <-chan error, out *syncBuffer) {
	t.Helper()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-done:
		if code := docsExitCode(cmd, err); code != 0 {
			docsFail(t, c, "SIGTERM: exit "+fmt.Sprint(code)+", want 0 (a clean stop)", code, out)
		}
	case <-time.After(docsStopWithin):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		docsFail(t, c, fmt.Sprintf("still running %v after SIGTERM", docsStopWithin), -1, out)
	}
}

func docsExitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState != nil {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return cmd.ProcessState.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// docsFail ends the subtest with where the command is, the command, its
// exit code and the last lines of its output.
func docsFail(t *testing.T, c docsCommand, what string, code int, out *syncBuffer) {
	t.Helper()
	t.Fatalf("%s: %s\n  $ %s\n  exit code %d; last lines of its output:\n%s", c.where(), what, c.text, code, docsLastLines(out.String(), 15))
}

func docsLastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, "    | "+sc.Text())
	}
	if len(lines) == 0 {
		return "    (none)"
	}
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("    (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func TestDocsShellCommands(t *testing.T) {
	noEngine(t)
	block := []string{
		"# a full-line comment",
		"",
		"bridge run script.py     # or: echo 'print(1)' | bridge run -",
		"echo 'not # a comment' \"a # in quotes\" a#b   # a comment",
		"claude mcp add x \\",
		"  --header \"Authorization: Bearer $T\"",
		"X=$(openssl rand -hex 32) bridge serve",
		`echo 'it''s' \\`,
	}
	want := []docsShellCommand{
		{3, "bridge run script.py", false},
		{3, "echo 'print(1)' | bridge run -", true},
		{4, `echo 'not # a comment' "a # in quotes" a#b`, false},
		{5, `claude mcp add x --header "Authorization: Bearer $T"`, false},
		{7, "X=$(openssl rand -hex 32) bridge serve", false},
		{8, `echo 'it''s' \\`, false},
	}
	got, err := docsShellCommands(block)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("docsShellCommands = %+v, %v\nwant %+v", got, err, want)
	}
	if _, err := docsShellCommands([]string{"a \\"}); err == nil {
		t.Error("a block that ends in a continuation is not an error")
	}
	md := "text\n  ```sh\n  indented\n    more\n  ```\n```yaml\nk: v\n```\n"
	blocks := docsFencedBlocks(md)
	if len(blocks) != 2 || blocks[0].info != "sh" || blocks[0].line != 2 || !slices.Equal(blocks[0].lines, []string{"indented", "  more"}) || blocks[1].info != "yaml" {
		t.Fatalf("docsFencedBlocks = %+v", blocks)
	}
}

// TestDocsLinks checks every relative link of README.md and docs/: the file
// it names is in the repository, and so is the heading its #anchor names
// (as GitHub makes anchors). A link out of the repository (../shared, say)
// fails: the repository must stand on its own.
func TestDocsLinks(t *testing.T) {
	noEngine(t)
	root := repoRoot()
	files := []string{filepath.Join(root, "README.md")}
	entries, err := os.ReadDir(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".md") {
			files = append(files, filepath.Join(root, "docs", e.Name()))
		}
	}
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				checked++
				if r, err := filepath.Rel(root, dest); err != nil || strings.HasPrefix(r, "..") {
					t.Errorf("%s:%d: %s points out of the repository", rel, i+1, target)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: %s: %v", rel, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !slices.Contains(docsAnchors(t, dest), anchor) {
					t.Errorf("%s:%d: %s: no heading makes #%s", rel, i+1, target, anchor)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links checked: the link pattern finds nothing", checked)
	}
}

// docsAnchors are the anchors of a markdown file's headings, as GitHub
// makes them: lower case, spaces to '-', punctuation but '-' and '_' gone,
// a repeated one suffixed -1, -2...
func docsAnchors(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var sb strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				sb.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				sb.WriteRune(r)
			}
		}
		a := sb.String()
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}
