package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Files the code writes to /tmp/outputs come back to a real MCP client
// (the go-sdk client over stdio): images as images, text as text
// resources, large files by reference, and each file that does not come
// back is named with the reason.

// pngCode writes a w x h grey PNG with the standard library alone.
const pngCode = `
import struct, zlib
def png(w, h):
    raw = b"".join(b"\x00" + bytes([128]) * w for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
`

// artifactPolicy writes a policy for e with an artifacts section and
// returns its path and the artifacts folder.
func artifactPolicy(t *testing.T, e *engine, artifacts string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	store := filepath.Join(dir, "artifacts")
	doc := "version: 1\n" + sandboxSection(e) + "  tmpfs_size: 256Mi\nartifacts:\n  dir: " + store + "\n" + artifacts
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, store
}

type artifactOut struct {
	Name     string `json:"name"`
	MIMEType string `json:"mime_type"`
	Bytes    int64  `json:"bytes"`
	Inlined  bool   `json:"inlined"`
	URI      string `json:"uri"`
	Note     string `json:"note"`
}

// runArtifacts runs code and returns the result and its artifacts.
func runArtifacts(t *testing.T, cs *mcp.ClientSession, code string) (*mcp.CallToolResult, []artifactOut, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, out := callRunPython(t, ctx, cs, code, nil)
	if res.IsError || out.Status != "ok" {
		t.Fatalf("run failed: status %q\n%s", out.Status, contentText(res))
	}
	var sc struct {
		Artifacts []artifactOut `json:"artifacts"`
		Unlisted  int           `json:"artifacts_unlisted"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	return res, sc.Artifacts, sc.Unlisted
}

func TestArtifacts(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		pol, store := artifactPolicy(t, e, "  max_bytes_stored: 64Mi\n  max_bytes_read: 32Mi\n")
		cs := connectStdioLarge(t, e, "--policy", pol)

		t.Run("image and csv inline", func(t *testing.T) {
			res, arts, _ := runArtifacts(t, cs, pngCode+`
import csv, os
from mcp_tools import show
print(show(png(64, 48)))
with open("/tmp/outputs/table.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["n", "square"])
    for n in range(1, 6):
        w.writerow([n, n * n])
`)
			if len(arts) != 2 || !arts[0].Inlined || arts[0].MIMEType != "image/png" || arts[1].Name != "table.csv" || arts[1].MIMEType != "text/csv" {
				t.Fatalf("artifacts = %+v", arts)
			}
			var img *mcp.ImageContent
			var csvText string
			for _, c := range res.Content {
				switch c := c.(type) {
				case *mcp.ImageContent:
					img = c
				case *mcp.EmbeddedResource:
					csvText = c.Resource.Text
				}
			}
			if img == nil {
				t.Fatalf("no image content in %s", contentText(res))
			}
			cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
			if err != nil || cfg.Width != 64 || cfg.Height != 48 {
				t.Errorf("the image decodes as %+v, %v; want a 64x48 PNG", cfg, err)
			}
			if want := "n,square\r\n1,1\r\n2,4\r\n3,9\r\n4,16\r\n5,25\r\n"; csvText != want {
				t.Errorf("csv = %q, want %q", csvText, want)
			}
		})

		t.Run("20 MiB by reference", func(t *testing.T) {
			res, arts, _ := runArtifacts(t, cs, `
import os
data = os.urandom(20 << 20)
open("/tmp/outputs/big.bin", "wb").write(data)
import hashlib
print(hashlib.sha256(data).hexdigest())
`)
			var link *mcp.ResourceLink
			for _, c := range res.Content {
				if l, ok := c.(*mcp.ResourceLink); ok {
					link = l
				}
			}
			if link == nil || len(arts) != 1 || arts[0].Inlined || arts[0].Bytes != 20<<20 {
				t.Fatalf("no resource link: %+v\n%s", arts, contentText(res))
			}
			ctx := context.Background()
			list, err := cs.ListResources(ctx, nil)
			if err != nil || !containsURI(list.Resources, link.URI) {
				t.Fatalf("resources/list: %v, %+v", err, list)
			}
			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
			if err != nil || len(rr.Contents) != 1 {
				t.Fatalf("resources/read %s: %v", link.URI, err)
			}
			sum := sha256.Sum256(rr.Contents[0].Blob)
			if got, want := hexString(sum[:]), strings.TrimSpace(contentText(res))[:64]; got != want {
				t.Errorf("resources/read gave sha256 %s, the code wrote %s", got, want)
			}
			// On the host: mode 0600 in a 0700 folder of the run.
			files, _ := filepath.Glob(filepath.Join(store, "run-*", "big.bin"))
			if len(files) != 1 {
				t.Fatalf("stored files %v", files)
			}
			if fi, err := os.Stat(files[0]); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("stored file mode %v, %v", fi.Mode(), err)
			}
		})

		t.Run("hostile files", func(t *testing.T) {
			res, arts, unlisted := runArtifacts(t, cs, `
import os, threading, time
out = "/tmp/outputs"
os.symlink("/etc/passwd", out + "/passwd")
os.mkfifo(out + "/fifo")
open(out + "/fake.png", "wb").write(b"not a png at all")
with open(out + "/huge.bin", "wb") as f:
    f.truncate(100 << 20)
def grow():
    with open(out + "/growing.log", "w") as f:
        while True:
            f.write("x" * 1000)
            f.flush()
threading.Thread(target=grow, daemon=True).start()
time.sleep(0.2)
for i in range(25):
    open(out + f"/many-{i:02}.txt", "w").write(str(i))
print("done")
`)
			notes := map[string]string{}
			for _, a := range arts {
				notes[a.Name] = a.Note
			}
			for name, want := range map[string]string{"passwd": "symbolic link", "fifo": "", "huge.bin": "", "fake.png": "not a PNG"} {
				note, ok := notes[name]
				if !ok || !strings.Contains(note, want) || note == "" {
					t.Errorf("%s: note %q (listed %v), want one with %q", name, note, ok, want)
				}
			}
			if notes["passwd"] != "" && strings.Contains(contentText(res), "root:") {
				t.Errorf("/etc/passwd's content came back")
			}
			// The runner sends max_files files, oldest first. growing.log is
			// the newest while its thread runs, so it is usually past the
			// twentieth and skipped; but a thread starved of CPU leaves it
			// older than some of many-*.txt, and then it is sent, changes
			// while read, and is cut: a file sent, not returned.
			returned, cut := 0, 0
			for _, a := range arts {
				switch {
				case a.Inlined || a.URI != "":
					returned++
				case strings.Contains(a.Note, "changed while it was being sent"):
					cut++
				}
			}
			if returned+cut != 20 || cut > 1 || unlisted == 0 && len(arts) < 25 {
				t.Errorf("%d files returned and %d cut (want max_files 20 sent, one cut at most), %d listed, %d unlisted:\n%s", returned, cut, len(arts), unlisted, contentText(res))
			}
			if !strings.Contains(contentText(res), "[not returned: ") {
				t.Errorf("the text does not say what did not come back:\n%s", contentText(res))
			}
		})
	})
}

// connectStdioLarge is connectStdioArgs with a client that takes messages
// of up to 64 MiB: go-sdk's CommandTransport takes 16 MiB, less than a 20
// MiB file's resources/read answer in base64.
func connectStdioLarge(t *testing.T, e *engine, extra ...string) *mcp.ClientSession {
	t.Helper()
	args, env := serveArgs(e)
	args = append(withoutSandboxFlags(args), extra...)
	cmd := exec.Command(testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: out, Writer: in, MaxLineLength: 64 << 20}, nil)
	if err != nil {
		t.Fatalf("connecting over stdio: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Logf("bridge serve: %v", err)
		}
		if t.Failed() {
			t.Logf("bridge serve stderr:\n%s", stderr.String())
		}
	})
	return cs
}

func containsURI(rs []*mcp.Resource, uri string) bool {
	for _, r := range rs {
		if r.URI == uri {
			return true
		}
	}
	return false
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// In the data-science image, a matplotlib figure shown with show() reaches
// the client as a PNG of the figure's size, and a CSV written by pandas as
// a text resource with its rows.
func TestArtifactsDataScience(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		pol, _ := artifactPolicy(t, e, "")
		b, err := os.ReadFile(pol)
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.Replace(string(b), "sandbox:\n", "sandbox:\n  variant: datascience\n", 1)
		if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		cs := connectStdioLarge(t, e, "--policy", pol)
		res, arts, _ := runArtifacts(t, cs, `
import math
import matplotlib.pyplot as plt
import pandas as pd
from mcp_tools import show
xs = [i / 10 for i in range(63)]
df = pd.DataFrame({"x": xs, "sin": [round(math.sin(x), 3) for x in xs]})
fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
ax.plot(df["x"], df["sin"])
print(show(fig))
df.head(3).to_csv("/tmp/outputs/sine.csv", index=False)
`)
		if len(arts) != 2 || arts[0].MIMEType != "image/png" || arts[1].MIMEType != "text/csv" {
			t.Fatalf("artifacts = %+v\n%s", arts, contentText(res))
		}
		var sawImage, sawCSV bool
		for _, c := range res.Content {
			switch c := c.(type) {
			case *mcp.ImageContent:
				cfg, err := png.DecodeConfig(bytes.NewReader(c.Data))
				if err != nil || cfg.Width != 400 || cfg.Height != 300 {
					t.Errorf("the figure decodes as %+v, %v; want a 400x300 PNG", cfg, err)
				}
				sawImage = true
			case *mcp.EmbeddedResource:
				if want := "x,sin\n0.0,0.0\n0.1,0.1\n0.2,0.199\n"; c.Resource.Text != want {
					t.Errorf("csv = %q, want %q", c.Resource.Text, want)
				}
				sawCSV = true
			}
		}
		if !sawImage || !sawCSV {
			t.Errorf("image %v, csv %v in\n%s", sawImage, sawCSV, contentText(res))
		}
	})
}
