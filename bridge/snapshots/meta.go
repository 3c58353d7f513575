package snapshots

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The kinds of snapshot: of the session's files only, or of its files
// and its processes' memory (gVisor's checkpoint).
const (
	KindFiles  = "files"
	KindMemory = "memory"
)

// LabelRule is what a label may be: a session name's rule (1 to 64
// letters, digits, '_', '.' or '-', starting with a letter or digit). It
// never starts with '.', so a label never names the store's own entries.
const LabelRule = `^[A-Za-z0-9][\w.-]{0,63}$`

var labelPattern = regexp.MustCompile(LabelRule)

// Bounds of what the metadata holds: a caller's values are refused past
// them, and a meta.json found past them is skipped as damaged.
const (
	MaxOwnerBytes  = 256  // an owner's name
	MaxImageBytes  = 512  // Meta.Image
	MaxEngineBytes = 64   // Meta.Engine and Meta.OCIRuntime
	MaxExtra       = 32   // entries of Meta.Extra
	MaxExtraKey    = 64   // bytes of a key of Meta.Extra
	MaxExtraValue  = 1024 // bytes of a value of Meta.Extra
	maxMetaBytes   = 64 << 10
	metaVersion    = 1
)

var extraKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Meta is what the caller says of a snapshot it saves.
type Meta struct {
	// Kind is KindFiles ("" means it) or KindMemory.
	Kind string `json:"kind"`
	// Image is the runner image (or another identity of the runner) the
	// session ran: a restore into another may not find what it left.
	Image string `json:"image,omitempty"`
	// Engine and OCIRuntime are the session's (docker, runsc...): a memory
	// snapshot restores only where the runtime can.
	Engine     string `json:"engine,omitempty"`
	OCIRuntime string `json:"oci_runtime,omitempty"`
	// Extra is the caller's own, small: at most MaxExtra keys of
	// [A-Za-z0-9_.-], values of MaxExtraValue bytes.
	Extra map[string]string `json:"extra,omitempty"`
}

// Entry is one snapshot kept.
type Entry struct {
	Owner string `json:"owner"`
	Label string `json:"label"`
	Meta
	// Size is the bytes of its data (files.tar).
	Size int64 `json:"size"`
	// MemoryBytes is the bytes of its memory folder (KindMemory: the
	// checkpoint's files); 0 for KindFiles. The owner's bounds count
	// Size plus MemoryBytes.
	MemoryBytes int64     `json:"memory_bytes,omitempty"`
	Created     time.Time `json:"created"`
	// Expires is Created plus the store's TTL: a snapshot is not found
	// from then on, and removed.
	Expires time.Time `json:"expires"`
}

// bytes is what the snapshot counts in its owner's MaxBytes.
func (e Entry) bytes() int64 { return e.Size + e.MemoryBytes }

// diskMeta is meta.json.
type diskMeta struct {
	Version int       `json:"v"`
	Owner   string    `json:"owner"`
	Label   string    `json:"label"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
	// MemoryBytes is Entry's, checked again by OpenMemory.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	Meta
}

// ownerDirName is the folder of an owner's snapshots: "o-" and the hex of
// the name's SHA-256, so that no principal name is ever a path.
func ownerDirName(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return ownerPrefix + hex.EncodeToString(sum[:])
}

// isOwnerDirName says whether name is one ownerDirName makes.
func isOwnerDirName(name string) bool {
	h, ok := strings.CutPrefix(name, ownerPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// checkOwner says what is wrong with an owner's name.
func checkOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("no owner given for the snapshot (the principal it belongs to, e.g. local)")
	case len(owner) > MaxOwnerBytes:
		return invalidf("the owner's name is %d bytes; at most %d", len(owner), MaxOwnerBytes)
	case !printable(owner):
		return invalidf("the owner's name %q is not printable UTF-8", owner)
	}
	return nil
}

// CheckLabel says what is wrong with a label: nil for one LabelRule
// takes.
func CheckLabel(label string) error {
	if !labelPattern.MatchString(label) {
		return invalidf("snapshot label %q: a label is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", label)
	}
	return nil
}

// printable is s valid UTF-8 without control characters.
func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

// check says what is wrong with m, and fills in its kind.
func (m *Meta) check() error {
	if m.Kind == "" {
		m.Kind = KindFiles
	}
	if m.Kind != KindFiles && m.Kind != KindMemory {
		return invalidf("snapshot kind %q: want %s or %s", m.Kind, KindFiles, KindMemory)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"image", m.Image, MaxImageBytes}, {"engine", m.Engine, MaxEngineBytes}, {"oci_runtime", m.OCIRuntime, MaxEngineBytes}} {
		if len(f.v) > f.max || !printable(f.v) {
			return invalidf("the snapshot's %s is not printable UTF-8 of at most %d bytes", f.name, f.max)
		}
	}
	if len(m.Extra) > MaxExtra {
		return invalidf("the snapshot's extra has %d entries; at most %d", len(m.Extra), MaxExtra)
	}
	for k, v := range m.Extra {
		if !extraKeyPattern.MatchString(k) {
			return invalidf("the snapshot's extra key %q is not 1 to %d letters, digits, '_', '.' or '-'", k, MaxExtraKey)
		}
		if len(v) > MaxExtraValue || !printable(v) {
			return invalidf("the snapshot's extra %s is not printable UTF-8 of at most %d bytes", k, MaxExtraValue)
		}
	}
	return nil
}

// check says what is wrong with meta.json found in the owner folder
// oname, in the folder label.
func (d *diskMeta) check(oname, label string) error {
	switch {
	case d.Version != metaVersion:
		return fmt.Errorf("written in format %d, this bridge reads %d", d.Version, metaVersion)
	case d.Label != label:
		return fmt.Errorf("it names the label %q, not its folder's", d.Label)
	case checkOwner(d.Owner) != nil || ownerDirName(d.Owner) != oname:
		return errors.New("it names an owner whose folder it is not in")
	case d.Created.IsZero():
		return errors.New("it has no creation time")
	case d.Size < 0 || d.MemoryBytes < 0:
		return errors.New("its size is negative")
	}
	if err := d.Meta.check(); err != nil {
		return err
	}
	if d.Kind != KindMemory && d.MemoryBytes != 0 {
		return fmt.Errorf("a snapshot of kind %s with %d bytes of memory", d.Kind, d.MemoryBytes)
	}
	return nil
}

// readMeta reads and checks the meta.json of the snapshot folder ldfd,
// named label in the owner folder oname, and the data it describes.
func (s *Store) readMeta(ldfd int, oname, label string) (Entry, error) {
	fd, err := unix.Openat(ldfd, metaName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Entry{}, fmt.Errorf("opening %s: %w", metaName, err)
	}
	f := os.NewFile(uintptr(fd), metaName)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Entry{}, fmt.Errorf("%s is not a regular file", metaName)
	}
	if st.Size > maxMetaBytes {
		return Entry{}, fmt.Errorf("%s is %d bytes; at most %d", metaName, st.Size, maxMetaBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxMetaBytes+1))
	if err != nil {
		return Entry{}, fmt.Errorf("reading %s: %w", metaName, err)
	}
	var d diskMeta
	if err := json.Unmarshal(data, &d); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", metaName, err)
	}
	if err := d.check(oname, label); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", metaName, err)
	}
	if err := unix.Fstatat(ldfd, filesName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Entry{}, fmt.Errorf("%s is missing or not a regular file", filesName)
	}
	if st.Size != d.Size {
		return Entry{}, fmt.Errorf("%s is %d bytes, %s says %d", filesName, st.Size, metaName, d.Size)
	}
	// The memory folder's bytes are counted again when it is opened
	// (OpenMemory), not on each scan.
	if d.Kind == KindMemory && (unix.Fstatat(ldfd, memoryName, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR) {
		return Entry{}, fmt.Errorf("a snapshot of kind %s whose %s is missing or not a folder", KindMemory, memoryName)
	}
	return Entry{Owner: d.Owner, Label: d.Label, Meta: d.Meta, Size: d.Size, MemoryBytes: d.MemoryBytes, Created: d.Created, Expires: d.Created.Add(s.ttl)}, nil
}

// writeMeta writes e's meta.json into the folder dfd, synced.
func writeMeta(dfd int, e Entry) error {
	data, err := json.Marshal(diskMeta{Version: metaVersion, Owner: e.Owner, Label: e.Label, Created: e.Created.UTC(), Size: e.Size, MemoryBytes: e.MemoryBytes, Meta: e.Meta})
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dfd, metaName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), metaName)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
