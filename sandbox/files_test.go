package sandbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordSink records what a run hands its Sink.
type recordSink struct {
	mu      sync.Mutex
	out     strings.Builder
	files   []*recordFile
	skipped []string
}

type recordFile struct {
	info  FileInfo
	data  bytes.Buffer
	ended bool
	err   error
}

func (s *recordSink) Output(_, data string) { s.mu.Lock(); s.out.WriteString(data); s.mu.Unlock() }
func (s *recordSink) File(f FileInfo) FileWriter {
	s.mu.Lock()
	defer s.mu.Unlock()
	rf := &recordFile{info: f}
	s.files = append(s.files, rf)
	return rf
}
func (s *recordSink) Skipped(f FileInfo, r SkipReason) {
	s.mu.Lock()
	s.skipped = append(s.skipped, fmt.Sprintf("%s:%d:%s", f.Name, f.Size, r))
	s.mu.Unlock()
}
func (f *recordFile) Write(p []byte) (int, error) { return f.data.Write(p) }
func (f *recordFile) End(err error)               { f.ended, f.err = true, err }

// frames is what a scripted runner sends after exec.
type frames []map[string]any

func fileFrames(id int, name string, data []byte, status string) frames {
	fs := frames{{"type": "file", "id": id, "name": name, "size": len(data)}}
	for len(data) > 0 {
		n := min(len(data), 1<<20)
		fs = append(fs, map[string]any{"type": "file_data", "id": id, "data": base64.StdEncoding.EncodeToString(data[:n])})
		data = data[n:]
	}
	return append(fs, map[string]any{"type": "file_end", "id": id, "status": status})
}

func exitOK() map[string]any { return map[string]any{"type": "exit", "status": "ok", "exit_code": 0} }

// runFiles runs a scripted runner that sends fs after exec, with limits l,
// and returns the result, the sink and the exec frame the runner got.
func runFiles(t *testing.T, l FileLimits, fs frames) (Result, *recordSink, map[string]any, error) {
	t.Helper()
	var exec map[string]any
	rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := dialRunner(ctx, sock)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = r.send(hello(token))
		if exec, err = r.recv(); err != nil {
			return ExitState{ExitCode: 1}
		}
		for _, f := range fs {
			if r.send(f) != nil {
				return ExitState{ExitCode: 1}
			}
		}
		// Until the bridge hangs up, as the runner would after exit.
		_, _ = r.recv()
		return ExitState{}
	})
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	sink := &recordSink{}
	res, err := ex.Run(context.Background(), Request{Code: "x", Limits: testLimits(), Sink: sink, Files: l})
	return res, sink, exec, err
}

func TestFilesOut(t *testing.T) {
	limits := FileLimits{MaxFiles: 3, MaxFileBytes: 3 << 20, MaxBytes: 4 << 20}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: three pieces
	var fs frames
	fs = append(fs, map[string]any{"type": "stdout", "data": "before\n"})
	fs = append(fs, fileFrames(1, "plots/a.png", []byte("\x89PNG..."), "complete")...)
	fs = append(fs, map[string]any{"type": "file_skip", "name": "link", "size": 0, "reason": "symlink"})
	fs = append(fs, fileFrames(2, "big.csv", big, "complete")...)
	fs = append(fs, frames{{"type": "file", "id": 3, "name": "growing.log", "size": 10},
		{"type": "file_data", "id": 3, "data": base64.StdEncoding.EncodeToString([]byte("12345"))},
		{"type": "file_end", "id": 3, "status": "changed"}}...)
	fs = append(fs, map[string]any{"type": "exit", "status": "ok", "exit_code": 0, "files_skipped": 42})
	res, sink, exec, err := runFiles(t, limits, fs)
	if err != nil || res.Status != StatusOK || res.Stdout != "before\n" || res.FilesSkipped != 42 {
		t.Fatalf("got %+v, %v", res, err)
	}
	if got := exec["files"]; fmt.Sprint(got) != "map[max_bytes:4.194304e+06 max_file_bytes:3.145728e+06 max_files:3]" {
		t.Errorf("exec files = %v", got)
	}
	if len(sink.files) != 3 {
		t.Fatalf("%d files, want 3", len(sink.files))
	}
	a, b, c := sink.files[0], sink.files[1], sink.files[2]
	if a.info.Name != "plots/a.png" || a.data.String() != "\x89PNG..." || !a.ended || a.err != nil {
		t.Errorf("file a: %+v", a)
	}
	if !bytes.Equal(b.data.Bytes(), big) || !b.ended || b.err != nil {
		t.Errorf("file b: %d bytes, ended %v, err %v", b.data.Len(), b.ended, b.err)
	}
	var cut *FileCutError
	if c.data.String() != "12345" || !c.ended || !errors.As(c.err, &cut) || cut.Why != "changed" || cut.Sent != 5 || cut.Size != 10 {
		t.Errorf("file c: %+v", c)
	}
	if strings.Join(sink.skipped, ",") != "link:0:symlink" {
		t.Errorf("skipped = %v", sink.skipped)
	}
}

func TestFilesOutProtocolErrors(t *testing.T) {
	limits := FileLimits{MaxFiles: 2, MaxFileBytes: 100, MaxBytes: 150}
	piece := func(id int, n int) map[string]any {
		return map[string]any{"type": "file_data", "id": id, "data": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), n))}
	}
	file := func(id int, name string, size int) map[string]any {
		return map[string]any{"type": "file", "id": id, "name": name, "size": size}
	}
	end := func(id int, status string) map[string]any {
		return map[string]any{"type": "file_end", "id": id, "status": status}
	}
	skips := frames{}
	for range 101 {
		skips = append(skips, map[string]any{"type": "file_skip", "name": "f", "size": 1, "reason": "too_many"})
	}
	tests := []struct {
		name string
		fs   frames
		want string
		// cut is whether the file the sink got was ended as cut.
		cut bool
	}{
		{"over max_file_bytes", frames{file(1, "a", 101)}, "over the 100 exec allowed", false},
		{"over max_bytes", frames{file(1, "a", 100), piece(1, 100), end(1, "complete"), file(2, "b", 51)}, "more than the 150 bytes", false},
		{"over max_files", frames{file(1, "a", 1), piece(1, 1), end(1, "complete"), file(2, "b", 1), piece(2, 1), end(2, "complete"), file(3, "c", 1)}, "more than the 2 files", false},
		{"more bytes than announced", frames{file(1, "a", 10), piece(1, 11)}, "sent more than its 10 bytes", true},
		{"complete but short", frames{file(1, "a", 10), piece(1, 5), end(1, "complete")}, "complete after 5 of its 10 bytes", true},
		{"id out of order", frames{file(2, "a", 1)}, "file id 2, want 1", false},
		{"two files open", frames{file(1, "a", 1), file(2, "b", 1)}, "file 2 before file 1 ended", true},
		{"data for no file", frames{piece(1, 1)}, "not being sent", false},
		{"end for no file", frames{end(1, "complete")}, "not being sent", false},
		{"exit inside a file", frames{file(1, "a", 5), exitOK()}, "exit inside file 1", true},
		{"too many skips", skips, "more than 100 file_skip", false},
		{"files when none allowed", nil, "more than the 0 files", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := limits
			fs := tt.fs
			if fs == nil {
				l, fs = FileLimits{}, frames{file(1, "a", 0)}
			}
			res, sink, _, err := runFiles(t, l, fs)
			if err != nil || res.Status != StatusError || !strings.Contains(res.Message, "relay protocol error") || !strings.Contains(res.Message, tt.want) {
				t.Fatalf("got %+v, %v; want a protocol error with %q", res, err, tt.want)
			}
			for _, f := range sink.files {
				if !f.ended {
					t.Errorf("file %s never ended", f.info.Name)
				}
			}
			if tt.cut {
				last := sink.files[len(sink.files)-1]
				var cut *FileCutError
				if !errors.As(last.err, &cut) {
					t.Errorf("file %s ended with %v, want a FileCutError", last.info.Name, last.err)
				}
			}
		})
	}
}

// The real runner (as a host process) and the bridge's side agree on files
// out: names, bytes, order, skips and the count beyond the skips reported.
func TestFilesFromRealRunner(t *testing.T) {
	ex := newTestExecutor(t, newFake(pythonRunner(t)), ExecutorOptions{})
	sink := &recordSink{}
	code := `
import os
out = os.environ["BRIDGE_OUTPUTS"]
os.makedirs(out + "/plots")
open(out + "/a.txt", "w").write("first")
os.utime(out + "/a.txt", (1, 1))
open(out + "/plots/b.bin", "wb").write(bytes(range(256)) * 8192)
os.symlink("/etc/passwd", out + "/passwd")
for i in range(120):
    open(out + f"/many-{i:03}.txt", "w").write("x")
print("ok")
`
	res, err := ex.Run(context.Background(), Request{Code: code, Limits: testLimits(), Sink: sink,
		Files: FileLimits{MaxFiles: 2, MaxFileBytes: 4 << 20, MaxBytes: 8 << 20}})
	if err != nil || res.Status != StatusOK || res.Stdout != "ok\n" {
		t.Fatalf("got %+v, %v", res, err)
	}
	if len(sink.files) != 2 || sink.files[0].info.Name != "a.txt" || sink.files[0].data.String() != "first" || sink.files[0].err != nil {
		t.Fatalf("files = %+v", sink.files)
	}
	if b := sink.files[1]; b.info.Name != "plots/b.bin" || b.data.Len() != 256*8192 || b.err != nil {
		t.Errorf("second file: %s, %d bytes, %v", b.info.Name, b.data.Len(), b.err)
	}
	// 121 files skipped (the link and 120 past max_files): 100 reported,
	// the rest counted.
	if len(sink.skipped) != 100 || res.FilesSkipped != 21 || !slices.Contains(sink.skipped, "passwd:0:symlink") {
		t.Errorf("skipped %d reported (%v...), %d counted", len(sink.skipped), sink.skipped[:min(3, len(sink.skipped))], res.FilesSkipped)
	}
}

// An Instance runs code once: a second Exec is refused, and Close after it
// removes the container.
func TestInstanceRunsCodeOnce(t *testing.T) {
	rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = r.send(exitOK())
		_, _ = r.recv()
		return ExitState{}
	})
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	ctx := context.Background()
	inst, err := ex.Start(ctx, testLimits(), "once")
	if err != nil {
		t.Fatal(err)
	}
	x := ExecRequest{RunID: "once", Code: "x", Timeout: 10 * time.Second, OutputBytes: 1024}
	if res, err := inst.Exec(ctx, x); err != nil || res.Status != StatusOK {
		t.Fatalf("first Exec: %+v, %v", res, err)
	}
	if _, err := inst.Exec(ctx, x); err == nil || !strings.Contains(err.Error(), "already ran code") {
		t.Errorf("second Exec: %v, want a refusal", err)
	}
	if err := inst.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Close(ctx); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
