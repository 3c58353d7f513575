package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
)

// BenchmarkRun measures one whole run per engine: create, start, runner
// connect, exec, exit, remove. make bench runs it; docs/performance.md
// reports it.
func BenchmarkRun(b *testing.B) {
	cases := []struct {
		name, code string
	}{
		{"pass", "pass"},
		{"print_1MiB", "import sys\nsys.stdout.write('x' * (1 << 20))"},
		{"asyncio", "import asyncio\nawait asyncio.sleep(0)"},
	}
	for _, e := range testSuite.engines {
		ex, err := sandbox.NewExecutor(context.Background(), e.rt, sandbox.ExecutorOptions{
			Image: imageName(), AllowUnenforcedLimits: !e.enforced, Logger: quiet(),
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cases {
			b.Run(e.name+"/"+c.name, func(b *testing.B) {
				l := limits()
				l.OutputBytes = 2 << 20
				var startup int64
				for b.Loop() {
					res, err := ex.Run(context.Background(), sandbox.Request{Code: c.code, Limits: l})
					if err != nil || res.Status != sandbox.StatusOK {
						b.Fatalf("status %s %v: %s", res.Status, err, strings.TrimSpace(res.Stderr))
					}
					startup += res.Startup.Microseconds()
				}
				b.ReportMetric(float64(startup)/float64(b.N)/1000, "startup-ms/op")
			})
		}
	}
}

// BenchmarkVariant measures what the data-science variant costs over slim:
// a whole run of ` + "`pass`" + ` in each variant's image (a bigger image, and an
// ENV, but the same runner), and, in the data-science image, importing
// pandas and matplotlib.pyplot as the code sees it (timed inside, as
// import-ms/op). docs/performance.md reports it.
func BenchmarkVariant(b *testing.B) {
	timed := func(imp string) string {
		return "import time\nt = time.perf_counter()\nimport " + imp + "\nprint((time.perf_counter() - t) * 1000)"
	}
	cases := []struct {
		variant, name, code string
	}{
		{images.Slim, "pass", "pass"},
		{images.DataScience, "pass", "pass"},
		{images.DataScience, "import_pandas", timed("pandas")},
		{images.DataScience, "import_pyplot", timed("matplotlib.pyplot")},
	}
	for _, e := range testSuite.engines {
		for _, c := range cases {
			b.Run(e.name+"/"+c.variant+"/"+c.name, func(b *testing.B) {
				ex, err := sandbox.NewExecutor(context.Background(), e.rt, sandbox.ExecutorOptions{
					Image: images.NameOf(c.variant), AllowUnenforcedLimits: !e.enforced, Logger: quiet(),
				})
				if err != nil {
					b.Fatal(err)
				}
				var startup int64
				var imported float64
				for b.Loop() {
					res, err := ex.Run(context.Background(), sandbox.Request{Code: c.code, Limits: limits()})
					if err != nil || res.Status != sandbox.StatusOK {
						b.Fatalf("status %s %v: %s", res.Status, err, strings.TrimSpace(res.Stderr))
					}
					startup += res.Startup.Microseconds()
					if c.code != "pass" {
						ms, err := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
						if err != nil {
							b.Fatalf("output %q", res.Stdout)
						}
						imported += ms
					}
				}
				b.ReportMetric(float64(startup)/float64(b.N)/1000, "startup-ms/op")
				if c.code != "pass" {
					b.ReportMetric(imported/float64(b.N), "import-ms/op")
				}
			})
		}
	}
}

// BenchmarkServeCall measures one run_python call through `bridge serve`
// over stdio, as an agent's client makes it: the MCP round trip on top of
// BenchmarkRun's whole run.
func BenchmarkServeCall(b *testing.B) {
	for _, e := range testSuite.engines {
		b.Run(e.name, func(b *testing.B) {
			args, env := serveArgs(e)
			cmd := exec.Command(testSuite.bridgeBin, args...)
			cmd.Env = append(os.Environ(), env...)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
				Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			p := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(21*2)"}}
			// The first call opens the engine; it is not what is measured.
			if res, err := cs.CallTool(context.Background(), p); err != nil || res.IsError {
				b.Fatalf("warm-up call: %v %+v", err, res)
			}
			for b.Loop() {
				res, err := cs.CallTool(context.Background(), p)
				if err != nil || res.IsError {
					b.Fatalf("call: %v %+v", err, res)
				}
			}
		})
	}
}

// BenchmarkSandboxToolCall measures tool calls made from the sandbox, as
// the code sees them: mcp_tools -> relay -> bridge -> in-process proxy ->
// a warm stdio upstream (the misbehave server's echo) and back. One op is
// one run_python whose code makes 200 calls, one after another ("seq") or
// all at once with asyncio.gather ("gather"); the code times them itself,
// reported as us/call.
func BenchmarkSandboxToolCall(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(b.TempDir(), "servers.json")
	doc, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"misbehave": map[string]any{"command": self, "env": map[string]string{upstreamEnv: "1"}},
	}})
	if err := os.WriteFile(cfg, doc, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, e := range testSuite.engines {
		args, env := serveArgs(e)
		cmd := exec.Command(testSuite.bridgeBin, append(args, "--servers-config", cfg)...)
		cmd.Env = append(os.Environ(), env...)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"seq", "gather"} {
			b.Run(e.name+"/"+mode, func(b *testing.B) {
				p := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": toolCallCode(mode, 200)}}
				var perCall float64
				for b.Loop() {
					res, err := cs.CallTool(context.Background(), p)
					if err != nil || res.IsError {
						b.Fatalf("call: %v %+v", err, res)
					}
					var out callOutput
					js, _ := json.Marshal(res.StructuredContent)
					_ = json.Unmarshal(js, &out)
					us, err := strconv.ParseFloat(strings.TrimSpace(out.Stdout), 64)
					if err != nil {
						b.Fatalf("output %q", out.Stdout)
					}
					perCall += us
				}
				b.ReportMetric(perCall/float64(b.N), "us/call")
			})
		}
		cs.Close()
	}
}

// toolCallCode is run_python code that calls the misbehave upstream's echo
// once, untimed, then n times, one after another ("seq") or all at once
// with asyncio.gather ("gather"), and prints the microseconds a call took,
// as it measured them.
func toolCallCode(mode string, n int) string {
	calls := map[string]string{
		"seq": `for i in range(N):
    mcp_tools.call("misbehave", "echo", message=str(i))`,
		"gather": `await asyncio.gather(*(mcp_tools.acall("misbehave", "echo", message=str(i)) for i in range(N)))`,
	}[mode]
	return strings.ReplaceAll(`import asyncio, time, mcp_tools
mcp_tools.call("misbehave", "echo", message="warm")
t = time.perf_counter()
`+calls+`
print((time.perf_counter() - t) / N * 1e6)`, "N", strconv.Itoa(n))
}

// BenchmarkArtifacts measures what returning files costs a run, through
// bridge serve and a real client: the same code writes a 1 MiB PNG and a
// 5 MiB CSV either to /tmp ("kept") or to /tmp/outputs ("returned": the
// PNG inline, the CSV stored by reference in artifacts.dir). The
// difference of the two is the cost of files out.
func BenchmarkArtifacts(b *testing.B) {
	code := `
import os, struct, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
w = h = 1024
raw = b"".join(b"\x00" + os.urandom(w) for _ in range(h))  # incompressible: ~1 MiB
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw, 0)) + chunk(b"IEND", b"")
csv = "".join(f"{i},{i * i},{i % 7}\n" for i in range(400000)).encode()[: 5 << 20]
d = "DIR"
os.makedirs(d, exist_ok=True)
open(d + "/chart.png", "wb").write(png)
open(d + "/table.csv", "wb").write(csv)
`
	for _, e := range testSuite.engines {
		b.Run(e.name, func(b *testing.B) {
			dir := b.TempDir()
			pol := filepath.Join(dir, "policy.yaml")
			doc := "version: 1\n" + sandboxSection(e) + "artifacts:\n  dir: " + filepath.Join(dir, "store") + "\n  max_bytes_inline: 2Mi\n  expiry: 1m\n"
			if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
				b.Fatal(err)
			}
			args, env := serveArgs(e)
			cmd := exec.Command(testSuite.bridgeBin, append(withoutSandboxFlags(args), "--policy", pol)...)
			cmd.Env = append(os.Environ(), env...)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
				Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			for _, where := range []struct{ name, dir string }{{"kept", "/tmp/kept"}, {"returned", "/tmp/outputs"}, {"png-only", "/tmp/outputs"}, {"csv-only", "/tmp/outputs"}} {
				c := strings.ReplaceAll(code, "DIR", where.dir)
				switch where.name {
				case "png-only":
					c = strings.Replace(c, `open(d + "/table.csv"`, `open("/tmp/table.csv"`, 1)
				case "csv-only":
					c = strings.Replace(c, `open(d + "/chart.png"`, `open("/tmp/chart.png"`, 1)
				}
				p := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": c}}
				b.Run(where.name, func(b *testing.B) {
					for b.Loop() {
						res, err := cs.CallTool(context.Background(), p)
						if err != nil || res.IsError {
							b.Fatalf("call: %v %+v", err, res)
						}
						if want := map[string]int{"kept": 1, "returned": 3, "png-only": 2, "csv-only": 2}[where.name]; len(res.Content) != want {
							b.Fatalf("%s: want %d content items, got %d", where.name, want, len(res.Content))
						}
					}
				})
			}
		})
	}
}
