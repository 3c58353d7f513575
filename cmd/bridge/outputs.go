package main

import (
	"fmt"
	"io"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/sandbox"
)

// runFiles is what `bridge run` does with the files the code leaves in
// /tmp/outputs: with --outputs DIR it keeps them there (an
// [artifacts.Folder], under the policy's artifacts.max_files and
// artifacts.max_bytes_stored); without, it only counts them, to say they
// were not kept.
type runFiles struct {
	folder *artifacts.Folder         // nil: files are counted, not kept
	col    *artifacts.Collector      // with folder
	output func(stream, data string) // the run's output, to the terminal
	count  int                       // without folder: files seen
}

// newRunFiles opens dir (created if missing) for the files of run runID
// under the limits l, or, when dir is "", counts them.
func newRunFiles(dir, runID string, l artifacts.Limits, output func(stream, data string)) (*runFiles, error) {
	rf := &runFiles{output: output}
	if dir == "" {
		return rf, nil
	}
	f, err := artifacts.OpenFolder(dir)
	if err != nil {
		return nil, usagef("--outputs: %v", err)
	}
	rf.folder, rf.col = f, artifacts.NewFolderCollector(runID, l, f)
	return rf, nil
}

// close closes the folder; the files stay.
func (rf *runFiles) close() {
	if rf.folder != nil {
		rf.folder.Close()
	}
}

// limits are what the runner is told to send: without a folder, no
// byte, but every file is still named (skipped, or sent empty), to be
// counted.
func (rf *runFiles) limits() sandbox.FileLimits {
	if rf.col != nil {
		return rf.col.FileLimits()
	}
	return sandbox.FileLimits{MaxFiles: 1}
}

// sink is the run's [sandbox.Sink].
func (rf *runFiles) sink() sandbox.Sink {
	if rf.col != nil {
		return keepSink{Collector: rf.col, output: rf.output}
	}
	return countSink{rf}
}

// keepSink keeps the files in the folder.
type keepSink struct {
	*artifacts.Collector
	output func(stream, data string)
}

func (s keepSink) Output(stream, data string) { s.output(stream, data) }

// countSink counts the files and drops them.
type countSink struct{ rf *runFiles }

func (s countSink) Output(stream, data string) { s.rf.output(stream, data) }

func (s countSink) File(sandbox.FileInfo) sandbox.FileWriter {
	s.rf.count++
	return sandbox.NoSink{}.File(sandbox.FileInfo{})
}

func (s countSink) Skipped(sandbox.FileInfo, sandbox.SkipReason) { s.rf.count++ }

var (
	_ sandbox.Sink = keepSink{}
	_ sandbox.Sink = countSink{}
)

// report says on w where each file went and which were not kept and why,
// or, without a folder, how many files were not kept. unreported counts
// files the runner skipped without naming them.
func (rf *runFiles) report(w io.Writer, unreported int64) {
	if rf.col == nil {
		if n := int64(rf.count) + unreported; n > 0 {
			fmt.Fprintf(w, "bridge: %d %s in %s %s not kept: pass --outputs DIR to keep them\n",
				n, plural(n, "file", "files"), sandbox.OutputsDir, plural(n, "was", "were"))
		}
		return
	}
	list, unlisted := rf.col.Artifacts()
	for _, a := range list {
		from := sandbox.OutputsDir + "/" + a.Name
		if a.Returned() {
			fmt.Fprintf(w, "bridge: kept %s as %s (%s, %s)\n", from, rf.keptPath(a), a.MIME, units.Bytes(a.Bytes))
			continue
		}
		fmt.Fprintf(w, "bridge: not kept: %s (%s): %s\n", from, units.Bytes(a.Bytes), strings.ReplaceAll(a.Note, "not returned", "not kept"))
	}
	if n := int64(unlisted) + unreported; n > 0 {
		fmt.Fprintf(w, "bridge: not kept: %d more %s in %s (past the limits of the policy's artifacts section)\n",
			n, plural(n, "file", "files"), sandbox.OutputsDir)
	}
}

// keptPath is where a kept file is, under the folder as the user named it.
func (rf *runFiles) keptPath(a artifacts.Artifact) string {
	u, err := url.Parse(a.URI)
	if err != nil {
		return a.URI
	}
	return filepath.Join(rf.folder.Dir(), path.Base(u.Path))
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
