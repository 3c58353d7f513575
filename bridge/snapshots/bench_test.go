package snapshots

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fill writes n snapshots of 1 KiB on disk as the store writes them,
// without its syncs (for speed), spread over owners owners.
func fill(b *testing.B, f *fixture, owners, n int) {
	b.Helper()
	data := make([]byte, 1024)
	for i := range n {
		owner := fmt.Sprint("owner-", i%owners)
		label := fmt.Sprint("label-", i)
		odir := filepath.Join(f.dir, ownerDirName(owner))
		dir := filepath.Join(odir, label)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filesName), data, 0o600); err != nil {
			b.Fatal(err)
		}
		created := f.clk.Now().Add(time.Duration(i) * time.Millisecond)
		meta, _ := json.Marshal(diskMeta{Version: metaVersion, Owner: owner, Label: label, Created: created, Size: int64(len(data)),
			Meta: Meta{Kind: KindFiles, Image: "runner:1", Engine: "docker", OCIRuntime: "runc", Extra: map[string]string{"session": "s"}}})
		if err := os.WriteFile(filepath.Join(dir, metaName), meta, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// List of one owner's 5,000 snapshots (more than max_count allows, as a
// folder filled by hand or by a lowered bound may hold).
func BenchmarkList5000(b *testing.B) {
	f := open(b, func(o *Options) { o.MaxCount = 5000 })
	fill(b, f, 1, 5000)
	b.ResetTimer()
	for b.Loop() {
		es, err := f.s.List("owner-0")
		if err != nil || len(es) != 5000 {
			b.Fatal(len(es), err)
		}
	}
}

// ListAll of 5,000 snapshots of 100 owners: what `bridge snapshots list`
// reads.
func BenchmarkListAll5000(b *testing.B) {
	f := open(b, nil)
	fill(b, f, 100, 5000)
	b.ResetTimer()
	for b.Loop() {
		es, err := f.s.ListAll()
		if err != nil || len(es) != 5000 {
			b.Fatal(len(es), err)
		}
	}
}

// Get of one snapshot among 5,000 (one owner's folder holding them all).
func BenchmarkGet5000(b *testing.B) {
	f := open(b, nil)
	fill(b, f, 1, 5000)
	b.ResetTimer()
	for b.Loop() {
		_, r, err := f.s.Get("owner-0", "label-2500")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

// Open of a folder of 5,000 snapshots: the sweep runs in the background.
func BenchmarkOpen5000(b *testing.B) {
	f := open(b, nil)
	fill(b, f, 100, 5000)
	b.ResetTimer()
	for b.Loop() {
		s, err := Open(Options{Dir: f.dir})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// A commit in a folder of 5,000 snapshots of 100 owners (50 each).
func BenchmarkCommit5000(b *testing.B) {
	f := open(b, func(o *Options) { o.MaxCount = 1000 })
	fill(b, f, 100, 5000)
	b.ResetTimer()
	for b.Loop() {
		if _, err := save(f.s, "owner-7", "new", "data"); err != nil {
			b.Fatal(err)
		}
	}
}

// A commit of a memory snapshot whose checkpoint is 64 MiB (4 files):
// what Commit adds to the engine's checkpoint is counting and syncing
// them. Each iteration writes the files first, outside the timer.
func BenchmarkCommitMemory64MiB(b *testing.B) {
	f := open(b, nil)
	chunk := make([]byte, 16<<20)
	b.SetBytes(64 << 20)
	for b.Loop() {
		b.StopTimer()
		w, err := f.s.Create("owner-0", "warm", Meta{Kind: KindMemory})
		if err != nil {
			b.Fatal(err)
		}
		dir, err := w.MemoryDir()
		if err != nil {
			b.Fatal(err)
		}
		for i := range 4 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("pages-", i, ".img")), chunk, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if _, err := w.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
