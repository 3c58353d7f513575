package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Notebook habits through `bridge serve` and a go-sdk client, on each
// engine, with the warm pool on (its default size, as users run it) and
// sessions on: each habit in a run and in a session's calls
// (docs/sandbox-api.md, "Notebook habits").

// notebookBridge starts `bridge serve` with the image variant, sessions on
// and the policy's extra sections, and connects to it.
func notebookBridge(t *testing.T, e *engine, variant, extra string) *mcp.ClientSession {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + "  variant: " + variant + "\nsessions:\n  enabled: true\n" + extra
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, _, _ := connectStdioArgs(t, e, nil, "--policy", path)
	return cs
}

// notebookRun is what one run_python call gave back: its structured
// result, its text and the sizes of the PNG images among its content.
type notebookRun struct {
	out    callOutput
	text   string
	images []string // "WxH" of each image content, in order
}

// notebookCall runs code (in session, if not "") and checks that the
// call itself answered.
func notebookCall(t *testing.T, cs *mcp.ClientSession, code, session string) notebookRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := map[string]any{"code": code}
	if session != "" {
		args["session"] = session
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %q: %v", code, err)
	}
	var r notebookRun
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &r.out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	r.text = contentText(res)
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
			if err != nil || img.MIMEType != "image/png" {
				t.Fatalf("an image that is no PNG (%s): %v", img.MIMEType, err)
			}
			r.images = append(r.images, fmt.Sprintf("%dx%d", cfg.Width, cfg.Height))
		}
	}
	return r
}

// inRunAndSession runs f once as a fresh run and once as the second call
// of a session whose first call ran setup (f's code then relies on it).
func inRunAndSession(t *testing.T, cs *mcp.ClientSession, setup string, f func(t *testing.T, call func(code string) notebookRun)) {
	t.Run("run", func(t *testing.T) {
		f(t, func(code string) notebookRun { return notebookCall(t, cs, setup+"\n"+code, "") })
	})
	t.Run("session", func(t *testing.T) {
		name := "nb-" + strings.ReplaceAll(t.Name(), "/", "-")
		if r := notebookCall(t, cs, setup, name); r.out.Status != "ok" || len(r.images) != 0 {
			t.Fatalf("the session's first call: %+v %s images %v", r.out, r.text, r.images)
		}
		f(t, func(code string) notebookRun { return notebookCall(t, cs, code, name) })
	})
}

const (
	notebookFrame = `import pandas as pd
import matplotlib.pyplot as plt
df = pd.DataFrame({"city": ["Oslo", "Lima"], "temp": [3.5, 18.0]})`
	frameTable  = "|  | city | temp |\n| --- | --- | ---: |\n| 0 | Oslo | 3.5 |\n| 1 | Lima | 18.0 |\n"
	seriesTable = "|  | temp |\n| --- | ---: |\n| 0 | 3.5 |\n| 1 | 18.0 |\n"
)

// notebookRule is where the notebook's tests run: they check what the
// runner makes of the code's output, which no engine changes.
func notebookRule() engineRule { return aboveEngine("the notebook's rendering in the runner") }

// plt.show() sends each open figure back as a PNG image and closes it.
func TestNotebookPltShow(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		cs := notebookBridge(t, e, "datascience", "")
		inRunAndSession(t, cs, notebookFrame, func(t *testing.T, call func(string) notebookRun) {
			r := call("plt.figure(figsize=(4, 3), dpi=100)\nplt.plot(df['temp'])\nplt.figure(figsize=(2, 2), dpi=100)\nplt.bar(df['city'], df['temp'])\nplt.show()\nprint(plt.get_fignums())")
			if r.out.Status != "ok" || r.out.Stdout != "[]\n" || strings.Join(r.images, " ") != "400x300 200x200" {
				t.Errorf("plt.show(): %+v images %v\n%s", r.out, r.images, r.text)
			}
		})
	})
}

// A figure still open when the code ends comes back, as with Jupyter's
// inline backend; in a session, with each call, and only once.
func TestNotebookFigureLeftOpen(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		cs := notebookBridge(t, e, "datascience", "")
		inRunAndSession(t, cs, notebookFrame, func(t *testing.T, call func(string) notebookRun) {
			r := call("fig, ax = plt.subplots(figsize=(3, 2), dpi=100)\nax.plot(df['temp'])\nprint('drawn')")
			if r.out.Status != "ok" || r.out.Stdout != "drawn\n" || strings.Join(r.images, " ") != "300x200" {
				t.Errorf("a figure left open: %+v images %v\n%s", r.out, r.images, r.text)
			}
			// The figure was closed: the next call sends nothing more (in a
			// session; a run is fresh anyway).
			r = call("print(plt.get_fignums())")
			if r.out.Stdout != "[]\n" || len(r.images) != 0 {
				t.Errorf("after: %+v images %v", r.out, r.images)
			}
		})
	})
}

// display(x, ...) shows a DataFrame as the Markdown table and other values
// as their repr; so does IPython.display.display, the stand-in.
func TestNotebookDisplay(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		cs := notebookBridge(t, e, "datascience", "")
		inRunAndSession(t, cs, notebookFrame, func(t *testing.T, call func(string) notebookRun) {
			r := call("display(df, 'done')\nfrom IPython.display import display as d\nd(df['temp'], 42)\nfig, ax = plt.subplots(figsize=(2, 1), dpi=100)\ndisplay(ax)")
			if r.out.Status != "ok" || r.out.Stdout != frameTable+"'done'\n"+seriesTable+"42\n" || strings.Join(r.images, " ") != "200x100" {
				t.Errorf("display: %+v images %v\n%s", r.out, r.images, r.text)
			}
		})
	})
}

// The value of the last expression statement shows as in Jupyter: its
// repr, a DataFrame or Series as a table, a plot as its figure; None and a
// trailing ';' show nothing; an expression that raises is an error with its
// line.
func TestNotebookLastExpression(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		cs := notebookBridge(t, e, "datascience", "")
		inRunAndSession(t, cs, notebookFrame+"\nx = 41", func(t *testing.T, call func(string) notebookRun) {
			for _, c := range []struct{ code, stdout, images string }{
				{"x + 1", "42\n", ""},
				{"{'a': [1, 2]}", "{'a': [1, 2]}\n", ""},
				{"df", frameTable, ""},
				{"df['temp']", seriesTable, ""},
				{"df.shape", "(2, 2)\n", ""},
				{"None", "", ""},
				{"print('only this')", "only this\n", ""},
				{"x + 1;", "", ""},
				{"import asyncio\nawait asyncio.sleep(0, result='awaited')", "'awaited'\n", ""},
				{"plt.figure(figsize=(2, 2), dpi=100)\nplt.plot(df['temp'])", "", "200x200"},
			} {
				r := call(c.code)
				if r.out.Status != "ok" || r.out.Stdout != c.stdout || strings.Join(r.images, " ") != c.images {
					t.Errorf("%q: %+v images %v\n%s", c.code, r.out, r.images, r.text)
				}
			}
			r := call("y = 1\ndf['nope']")
			if r.out.Status != "error" || r.out.Stdout != "" || !strings.Contains(r.out.Stderr, "in <module>\n    df['nope']\n") || !strings.Contains(r.out.Stderr, "KeyError: 'nope'") {
				t.Errorf("a last expression that raises: %+v", r.out)
			}
		})
	})
}

// df.to_markdown() (tabulate) and df.style (Jinja2) work in the
// data-science image.
func TestNotebookToMarkdownAndStyle(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		cs := notebookBridge(t, e, "datascience", "")
		inRunAndSession(t, cs, notebookFrame, func(t *testing.T, call func(string) notebookRun) {
			r := call("print(df.to_markdown())\nhtml = df.style.format(precision=1).to_html()\nprint(html.count('<td'), 'Oslo' in html, '18.0' in html)")
			want := "|    | city   |   temp |\n|---:|:-------|-------:|\n|  0 | Oslo   |    3.5 |\n|  1 | Lima   |   18   |\n4 True True\n"
			if r.out.Status != "ok" || r.out.Stdout != want {
				t.Errorf("to_markdown and style: %+v\nwant stdout %q", r.out, want)
			}
		})
	})
}

// help() in a session says what a session keeps and what its timeout does,
// and lists the operator's mounts, the image variant and its packages; in
// a fresh run it says that nothing is kept.
func TestNotebookHelp(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		sales, other := mountedFolder(t)
		cs := notebookBridge(t, e, "datascience", "mounts:\n  - host: "+sales+"\n  - host: "+other+"\n    path: /data/other\n")
		common := []string{
			"image datascience.",
			"- Packages: numpy, pandas, matplotlib, scipy, sklearn, PIL, openpyxl, tabulate, jinja2 and the standard library; no pip.",
			"- Mounted folders, from the operator: /data/other (read-only), 1 entry: note.txt /data/sales (read-only), 3 entries: sales.csv, tool.sh, true -",
			"As in Jupyter, the last line's expression is shown",
			"plt.show() and figures left open come back as images.",
		}
		r := notebookCall(t, cs, "import mcp_tools\nmcp_tools.help()", "h")
		flat := strings.Join(strings.Fields(r.out.Stdout), " ")
		for _, want := range append(common,
			"in a session's container",
			"earlier calls' variables, imports and /tmp files are here",
			"sent files of /tmp/outputs come back only if changed.",
			"A snapshot keeps /tmp files only",
			"The call's timeout (or cancellation) raises KeyboardInterrupt: code that stops within 3 s keeps the session and its state; code that goes on is killed with its container and the state is lost",
		) {
			if !strings.Contains(flat, want) {
				t.Errorf("help() in a session lacks %q:\n%s", want, r.out.Stdout)
			}
		}
		if strings.Contains(flat, "Nothing is kept") || strings.Contains(flat, "fresh container") {
			t.Errorf("help() in a session says it is fresh:\n%s", r.out.Stdout)
		}
		r = notebookCall(t, cs, "import mcp_tools\nmcp_tools.help()", "")
		flat = strings.Join(strings.Fields(r.out.Stdout), " ")
		for _, want := range append(common, "in a fresh container", "Nothing is kept between calls.", "inputs in /tmp/inputs, read-only", "the call's timeout kills the container") {
			if !strings.Contains(flat, want) {
				t.Errorf("help() in a run lacks %q:\n%s", want, r.out.Stdout)
			}
		}
	})
}

// TestNotebookFigureFlood: code that leaves 300 figures open, or shows 300
// in a loop, gets back at most artifacts.max_files images, is told of the
// rest, and the bridge answers within the run's time with its pool on.
func TestNotebookFigureFlood(t *testing.T) {
	forEngines(t, notebookRule(), func(t *testing.T, e *engine) {
		cs := notebookBridge(t, e, "datascience", "artifacts:\n  max_files: 5\n")
		for name, code := range map[string]string{
			"left open": "import matplotlib.pyplot as plt\nfor i in range(300):\n    plt.figure(figsize=(1, 1), dpi=20)\nprint(len(plt.get_fignums()))",
			"shown":     "import matplotlib.pyplot as plt\nfor i in range(300):\n    plt.figure(figsize=(1, 1), dpi=20)\n    plt.show()\nprint(len(plt.get_fignums()))",
		} {
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				start := time.Now()
				r := notebookCall(t, cs, code, "")
				t.Logf("%s: %s in %s, %d images", name, r.out.Status, time.Since(start).Round(time.Millisecond), len(r.images))
				if r.out.Status != "ok" || len(r.images) != 5 {
					t.Errorf("%+v: %d images, want 5 (artifacts.max_files)\n%s", r.out, len(r.images), r.text)
				}
				if !strings.Contains(r.text, "past artifacts.max_files (5)") || !strings.Contains(r.text, "290 more") {
					t.Errorf("the 295 files over the limit are not reported:\n%s", r.text)
				}
			})
		}
	})
}
