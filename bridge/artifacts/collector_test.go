package artifacts

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

// sink is what a bridge makes of a Collector: a sandbox.Sink.
type sink struct {
	*Collector
	out strings.Builder
}

func (s *sink) Output(_, data string) { s.out.WriteString(data) }

var _ sandbox.Sink = (*sink)(nil)

// file is one file the runner sends: its bytes, then how it ends.
type file struct {
	name string
	data []byte
	size int64 // announced; 0: len(data)
	end  error
	skip sandbox.SkipReason // not sent: skipped for this reason
}

// send feeds files to c as the relay would, in pieces of at most 64 KiB.
func send(t *testing.T, c *Collector, files ...file) {
	t.Helper()
	for _, f := range files {
		size := f.size
		if size == 0 {
			size = int64(len(f.data))
		}
		info := sandbox.FileInfo{Name: f.name, Size: size}
		if f.skip != "" {
			c.Skipped(info, f.skip)
			continue
		}
		w := c.File(info)
		for p := f.data; len(p) > 0; {
			n := min(len(p), 64<<10)
			if _, err := w.Write(p[:n]); err != nil {
				break
			}
			p = p[n:]
		}
		w.End(f.end)
	}
}

func png(n int) []byte {
	b := make([]byte, n)
	copy(b, pngSig)
	return b
}

func text(n int) []byte { return bytes.Repeat([]byte("a,b\n"), n/4) }

func TestCollectorInline(t *testing.T) {
	c := NewCollector("r1", DefaultLimits(), nil)
	send(t, c,
		file{name: "plots/a.png", data: png(1000)},
		file{name: "t.csv", data: []byte("a,b\n1,2\n")},
		file{name: "fake.png", data: []byte("not a png")},
		file{name: "raw.bin", data: []byte{0, 1, 2}},
		file{name: "a\x1b[2J.txt", data: []byte("x")},
	)
	list, unlisted := c.Artifacts()
	want := []Artifact{
		{Name: "plots/a.png", MIME: "image/png", Kind: Image, Bytes: 1000, Inlined: true, Data: png(1000)},
		{Name: "t.csv", MIME: "text/csv", Kind: Text, Bytes: 8, Inlined: true, Data: []byte("a,b\n1,2\n")},
		{Name: "fake.png", MIME: OctetStream, Kind: Blob, Bytes: 9, Inlined: true, Data: []byte("not a png"),
			Note: "named .png but not a PNG (no PNG signature): returned as bytes"},
		{Name: "raw.bin", MIME: OctetStream, Kind: Blob, Bytes: 3, Inlined: true, Data: []byte{0, 1, 2}},
		{Name: `a\x1b[2J.txt`, MIME: "text/plain", Kind: Text, Bytes: 1, Inlined: true, Data: []byte("x")},
	}
	if unlisted != 0 || len(list) != len(want) {
		t.Fatalf("%d listed, %d not: %+v", len(list), unlisted, list)
	}
	for i := range want {
		if !sameArtifact(list[i], want[i]) {
			t.Errorf("artifact %d:\n got %+v\nwant %+v", i, brief(list[i]), brief(want[i]))
		}
	}
}

func sameArtifact(a, b Artifact) bool {
	return a.Name == b.Name && a.MIME == b.MIME && a.Kind == b.Kind && a.Bytes == b.Bytes && a.Inlined == b.Inlined &&
		bytes.Equal(a.Data, b.Data) && a.URI == b.URI && a.Note == b.Note
}

// brief is an Artifact without its data, to print.
func brief(a Artifact) Artifact {
	a.Data = a.Data[:min(len(a.Data), 16)]
	return a
}

// TestCollectorPlaces: where each file goes, and its note, by the limits
// and whether there is a store.
func TestCollectorPlaces(t *testing.T) {
	const mib = 1 << 20
	lim := DefaultLimits()
	all := lim
	all.ByReference = ByReferenceAll
	few := lim
	few.MaxFiles = 2
	smallStore := lim
	smallStore.MaxBytesStored = 3 * mib
	wide := lim
	wide.MaxBytesInline = 4 * mib
	tests := []struct {
		name  string
		lim   Limits
		store bool
		files []file
		want  []string // per file: "inline", "stored", or a substring of the note of one not returned
	}{
		{"small inline", lim, false, []file{{name: "a.png", data: png(mib)}}, []string{"inline"}},
		{"over inline, no store", lim, false, []file{{name: "a.png", data: png(mib + 1)}},
			[]string{"over the 1 MiB inline limit (artifacts.max_bytes_inline): not returned; write a smaller file, or set artifacts.dir"}},
		{"over inline, store", lim, true, []file{{name: "a.png", data: png(mib + 1)}}, []string{"stored"}},
		{"inline total, no store", lim, false, []file{
			{name: "1.csv", data: text(mib)}, {name: "2.csv", data: text(mib)}, {name: "3.csv", data: text(mib)},
			{name: "4.csv", data: text(mib)}, {name: "5.csv", data: text(100)}, {name: "empty", data: nil},
		}, []string{"inline", "inline", "inline", "inline",
			"would pass the 4 MiB all inline files of one result may total (artifacts.max_bytes_total): not returned; write fewer or smaller files, or set artifacts.dir", "inline"}},
		{"inline total, store", lim, true, []file{
			{name: "1.csv", data: text(2 * mib)}, {name: "2.csv", data: text(mib)}, {name: "3.csv", data: text(2 * mib)},
		}, []string{"stored", "inline", "stored"}},
		{"all by reference", all, true, []file{{name: "a.png", data: png(10)}, {name: "empty", data: nil}}, []string{"stored", "stored"}},
		{"all without a store", all, false, []file{{name: "a.png", data: png(10)}}, []string{"inline"}},
		{"max files", few, true, []file{
			{name: "1", data: text(8)}, {name: "big", data: text(2 * mib)}, {name: "3", data: text(8)},
		}, []string{"inline", "stored", "past artifacts.max_files (2): not returned; write fewer files"}},
		{"max stored", smallStore, true, []file{
			{name: "1.csv", data: text(2 * mib)}, {name: "2.csv", data: text(2 * mib)}, {name: "3.csv", data: text(mib / 2)},
		}, []string{"stored", "would pass the 3 MiB one run may store on the host (artifacts.max_bytes_stored)", "inline"}},
		{"a cut inline file gives its room back", wide, false, []file{
			{name: "1.csv", data: text(3 * mib), size: 4 * mib, end: &sandbox.FileCutError{Sent: 3 * mib, Size: 4 * mib, Why: "changed"}},
			{name: "2.csv", data: text(4 * mib)},
		}, []string{"the file changed while it was being sent (still being written when the code ended?): not returned (3 MiB of 4 MiB arrived)", "inline"}},
		{"a cut stored file gives its room back", smallStore, true, []file{
			{name: "1.csv", data: text(mib), size: 3 * mib, end: &sandbox.FileCutError{Sent: mib, Size: 3 * mib, Why: "unreadable"}},
			{name: "2.csv", data: text(3 * mib)},
		}, []string{"reading the file failed midway: not returned (1 MiB of 3 MiB arrived)", "stored"}},
		{"ended short without an error", lim, false, []file{{name: "1.csv", data: text(8), size: 10}},
			[]string{"the run ended before the file was sent: not returned (8 bytes of 10 bytes arrived)"}},
		{"another end error", lim, false, []file{{name: "1.csv", data: text(8), end: errors.New("boom")}}, []string{"boom: not returned"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var store *Store
			if tt.store {
				store, _ = openTestStore(t, StoreOptions{})
			}
			c := NewCollector("r1", tt.lim, store)
			send(t, c, tt.files...)
			list, _ := c.Artifacts()
			if len(list) != len(tt.want) {
				t.Fatalf("%d artifacts, want %d: %+v", len(list), len(tt.want), list)
			}
			for i, a := range list {
				f := tt.files[i]
				switch w := tt.want[i]; w {
				case "inline":
					if !a.Inlined || !bytes.Equal(a.Data, f.data) || a.URI != "" || a.Note != "" {
						t.Errorf("%s: want it inline: %+v", f.name, brief(a))
					}
				case "stored":
					if a.Inlined || a.URI == "" || !strings.HasPrefix(a.Note, "by reference") {
						t.Errorf("%s: want it stored: %+v", f.name, brief(a))
						continue
					}
					if _, body, err := read(store, a.URI); err != nil || body != string(f.data) {
						t.Errorf("%s: stored %d bytes, %v", f.name, len(body), err)
					}
				default:
					if a.Returned() || a.Data != nil || !strings.Contains(a.Note, w) {
						t.Errorf("%s: want it not returned with %q: %+v", f.name, w, brief(a))
					}
				}
			}
			if store != nil {
				// Nothing but the files returned is left in the folder.
				n := 0
				for _, a := range list {
					if a.URI != "" {
						n++
					}
				}
				if files := filesIn(t, store.dir); len(files) != n {
					t.Errorf("files in the store: %q, want %d", files, n)
				}
				if store.reserved != 0 {
					t.Errorf("%d bytes still reserved in the store", store.reserved)
				}
			}
		})
	}
}

func TestCollectorStoredNotes(t *testing.T) {
	s, _ := openTestStore(t, StoreOptions{})
	c := NewCollector("r1", DefaultLimits(), s)
	send(t, c,
		file{name: "big.png", data: png(2 << 20)},
		file{name: "big.jpg", data: text(2 << 20)},
		file{name: "big.csv", data: append(text(2<<20), 0xff)},
	)
	list, _ := c.Artifacts()
	for i, want := range []struct{ mime, note string }{
		{"image/png", "by reference: over the 1 MiB inline limit (artifacts.max_bytes_inline)"},
		{OctetStream, "by reference: over the 1 MiB inline limit (artifacts.max_bytes_inline); named .jpg but not a JPEG"},
		{OctetStream, "by reference: over the 1 MiB inline limit (artifacts.max_bytes_inline); named .csv but not UTF-8 text"},
	} {
		if a := list[i]; a.MIME != want.mime || !strings.HasPrefix(a.Note, want.note) {
			t.Errorf("%s: %s %q; want %s %q", a.Name, a.MIME, a.Note, want.mime, want.note)
		}
	}
	if e := s.List(); len(e) != 3 || e[0].Kind != Image || e[2].MIME != OctetStream || e[0].URI != "bridge://runs/r1/big.png" {
		t.Errorf("store: %+v", e)
	}
}

func TestCollectorSkipped(t *testing.T) {
	s, _ := openTestStore(t, StoreOptions{})
	for _, tt := range []struct {
		store  *Store
		reason sandbox.SkipReason
		want   string
	}{
		{nil, sandbox.SkipSymlink, "a symbolic link: never followed"},
		{nil, sandbox.SkipSpecial, "a FIFO, socket or device"},
		{nil, sandbox.SkipTooLarge, "over the 1 MiB inline limit (artifacts.max_bytes_inline): not returned; write a smaller file, or set artifacts.dir"},
		{s, sandbox.SkipTooLarge, "over the 256 MiB one file may be (artifacts.max_bytes_stored, artifacts.max_bytes_kept)"},
		{nil, sandbox.SkipOverTotal, "would pass the 4 MiB all files of one run may total"},
		{s, sandbox.SkipOverTotal, "would pass the 260 MiB all files of one run may total"},
		{nil, sandbox.SkipTooMany, "past artifacts.max_files (20)"},
		{nil, sandbox.SkipUnreadable, "could not be opened or read in the sandbox"},
		{nil, sandbox.SkipBadName, "rename it"},
		{nil, "new\nreason", `not sent by the sandbox (new\x0areason)`},
	} {
		c := NewCollector("r1", DefaultLimits(), tt.store)
		c.Skipped(sandbox.FileInfo{Name: "x\x00", Size: 5}, tt.reason)
		list, _ := c.Artifacts()
		if len(list) != 1 || list[0].Returned() || list[0].Name != `x\x00` || list[0].Bytes != 5 || !strings.Contains(list[0].Note, tt.want) {
			t.Errorf("%s: %+v; want a note with %q", tt.reason, list, tt.want)
		}
	}
}

// TestCollectorListCap: past MaxListed files not returned are counted,
// not listed; the files returned are always listed.
func TestCollectorListCap(t *testing.T) {
	c := NewCollector("r1", DefaultLimits(), nil)
	for i := range 150 {
		c.Skipped(sandbox.FileInfo{Name: fmt.Sprintf("l%d", i)}, sandbox.SkipSymlink)
	}
	send(t, c, file{name: "big.bin", data: make([]byte, 2<<20)}, file{name: "ok.txt", data: []byte("ok")})
	list, unlisted := c.Artifacts()
	if len(list) != MaxListed+1 || unlisted != 51 || list[MaxListed].Name != "ok.txt" || !list[MaxListed].Inlined {
		t.Errorf("%d listed (last %+v), %d not", len(list), list[len(list)-1], unlisted)
	}
}

func TestCollectorFileLimits(t *testing.T) {
	const mib = 1 << 20
	s, _ := openTestStore(t, StoreOptions{MaxBytesKept: 100 * mib})
	big, _ := openTestStore(t, StoreOptions{MaxBytesKept: math.MaxInt64})
	all := DefaultLimits()
	all.ByReference = ByReferenceAll
	huge := DefaultLimits()
	huge.MaxBytesTotal, huge.MaxBytesStored = math.MaxInt64, math.MaxInt64
	tiny := DefaultLimits()
	tiny.MaxBytesTotal = 1000
	for _, tt := range []struct {
		lim   Limits
		store *Store
		want  sandbox.FileLimits
	}{
		{DefaultLimits(), nil, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: mib, MaxBytes: 4 * mib}},
		{tiny, nil, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: 1000, MaxBytes: 1000}},
		{DefaultLimits(), big, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: 256 * mib, MaxBytes: 260 * mib}},
		{DefaultLimits(), s, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: 100 * mib, MaxBytes: 260 * mib}},
		{all, big, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: 256 * mib, MaxBytes: 256 * mib}},
		{all, nil, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: mib, MaxBytes: 4 * mib}},
		{huge, big, sandbox.FileLimits{MaxFiles: 20, MaxFileBytes: math.MaxInt64, MaxBytes: math.MaxInt64}},
		{Limits{MaxFiles: -1, MaxBytesInline: -1}, nil, sandbox.FileLimits{}},
	} {
		if got := NewCollector("r1", tt.lim, tt.store).FileLimits(); got != tt.want {
			t.Errorf("FileLimits(%+v, store %v) = %+v, want %+v", tt.lim, tt.store != nil, got, tt.want)
		}
	}
}

// TestCollectorMisuse: what the relay never does does no harm.
func TestCollectorMisuse(t *testing.T) {
	s, _ := openTestStore(t, StoreOptions{})
	c := NewCollector("r1", DefaultLimits(), s)
	// More bytes than announced, inline and stored.
	w := c.File(sandbox.FileInfo{Name: "a.txt", Size: 2})
	if _, err := w.Write([]byte("abc")); err == nil {
		t.Error("3 bytes of 2 were taken")
	}
	w.Write([]byte("a"))
	w.End(nil)
	w.End(nil)
	w = c.File(sandbox.FileInfo{Name: "b.txt", Size: 2 << 20})
	w.Write(make([]byte, 1<<20))
	if _, err := w.Write(make([]byte, 1<<20+1)); err == nil {
		t.Error("a stored file took more than announced")
	}
	w.End(nil)
	// A file started before the last ended, and one never ended.
	c.File(sandbox.FileInfo{Name: "c.txt", Size: 5}).Write([]byte("abc"))
	w = c.File(sandbox.FileInfo{Name: "d.bin", Size: 3 << 20})
	w.Write([]byte("abc"))
	if _, err := c.File(sandbox.FileInfo{Name: "e", Size: -1}).Write([]byte("x")); err == nil {
		t.Error("a file of size -1 took bytes")
	}
	list, _ := c.Artifacts()
	if _, err := w.Write([]byte("late")); err == nil {
		t.Error("a file took bytes after Artifacts")
	}
	w.End(nil)
	notes := []string{"more bytes arrived than the 2 announced", "more bytes arrived than the 2097152 announced",
		"the run ended before the file was sent", "the run ended before the file was sent", "its size was not known"}
	if len(list) != len(notes) {
		t.Fatalf("%d listed: %+v", len(list), list)
	}
	for i, a := range list {
		if a.Returned() || !strings.Contains(a.Note, notes[i]) {
			t.Errorf("%s: %+v, want a note with %q", a.Name, brief(a), notes[i])
		}
	}
	if files := filesIn(t, s.dir); len(files) != 0 || s.reserved != 0 {
		t.Errorf("left in the store: %q, %d reserved", files, s.reserved)
	}
}

// TestCollectorStoreFails: a store that fails mid-file (closed under the
// run) costs the file, not the run.
func TestCollectorStoreFails(t *testing.T) {
	s, _ := openTestStore(t, StoreOptions{})
	c := NewCollector("r1", DefaultLimits(), s)
	w := c.File(sandbox.FileInfo{Name: "a.csv", Size: 2 << 20})
	w.Write(text(1 << 20))
	c.cur.sw.(*storeWriter).f.Close() // the disk goes away
	if _, err := w.Write(text(1 << 20)); err == nil {
		t.Error("a failed write was not reported")
	}
	w.End(nil)
	s.Close()
	send(t, c, file{name: "b.csv", data: text(2 << 20)}, file{name: "c.csv", data: text(8)})
	list, _ := c.Artifacts()
	for i, want := range []string{"could not be stored on the host: writing to artifacts.dir", "could not be stored on the host: the bridge is shutting down", ""} {
		if a := list[i]; want == "" && !a.Inlined || want != "" && (a.Returned() || !strings.Contains(a.Note, want)) {
			t.Errorf("%s: %+v, want %q", a.Name, brief(a), want)
		}
	}
	if files := filesIn(t, filepath.Dir(s.dir)); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}
}

// TestCollectorMemoryBounded: a 50 MiB file that fits nowhere is read and
// dropped; the Collector holds none of it.
func TestCollectorMemoryBounded(t *testing.T) {
	const size = 50 << 20
	c := NewCollector("r1", DefaultLimits(), nil)
	piece := make([]byte, 1<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := c.File(sandbox.FileInfo{Name: "huge.bin", Size: size})
	for range size / len(piece) {
		if _, err := w.Write(piece); err != nil {
			t.Fatal(err)
		}
		if n := c.retained(); n != 0 {
			t.Fatalf("the Collector holds %d bytes", n)
		}
	}
	w.End(nil)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("dropping a 50 MiB file allocated %d bytes", grew)
	}
	// Inline files: held to what MaxBytesTotal allows.
	send(t, c, file{name: "1", data: text(1 << 20)}, file{name: "2", data: text(1 << 20)}, file{name: "3", data: text(1 << 20)},
		file{name: "4", data: text(1 << 20)}, file{name: "5", data: text(1 << 20)})
	if n := c.retained(); n != 4<<20 {
		t.Errorf("the Collector holds %d bytes, want 4 MiB", n)
	}
}

// TestCollectorStoredMemory: a 20 MiB file streams to the store.
func TestCollectorStoredMemory(t *testing.T) {
	const size = 20 << 20
	s, _ := openTestStore(t, StoreOptions{})
	c := NewCollector("r1", DefaultLimits(), s)
	piece := bytes.Repeat([]byte("abcdefg\n"), 1<<17)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := c.File(sandbox.FileInfo{Name: "big.txt", Size: size})
	for range size / len(piece) {
		if _, err := w.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	w.End(nil)
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("storing a 20 MiB file allocated %d bytes", grew)
	}
	list, _ := c.Artifacts()
	if len(list) != 1 || list[0].URI == "" || list[0].Kind != Text {
		t.Errorf("%+v", list)
	}
}

// BenchmarkCollect: a 1 MiB PNG inline and a 5 MiB CSV stored, per run.
func BenchmarkCollect(b *testing.B) {
	s, err := OpenStore(StoreOptions{Dir: filepath.Join(b.TempDir(), "store"), MaxBytesKept: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	img := png(1 << 20)
	csv := text(5 << 20)
	b.SetBytes(int64(len(img) + len(csv)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c := NewCollector(fmt.Sprintf("run%d", i), DefaultLimits(), s)
		for _, f := range []struct {
			name string
			data []byte
		}{{"plot.png", img}, {"data.csv", csv}} {
			w := c.File(sandbox.FileInfo{Name: f.name, Size: int64(len(f.data))})
			for p := f.data; len(p) > 0; p = p[min(len(p), 1<<20):] {
				w.Write(p[:min(len(p), 1<<20)])
			}
			w.End(nil)
		}
		if list, _ := c.Artifacts(); len(list) != 2 || !list[0].Inlined || list[1].URI == "" {
			b.Fatalf("%+v", list)
		}
	}
}
