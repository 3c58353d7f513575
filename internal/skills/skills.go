// Package skills keeps the Python modules that runs save for later runs
// ("skills"): one JSON file per skill in a folder the operator chooses,
// written atomically, checked before anything is written.
package skills

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits bound what a store holds.
type Limits struct {
	// MaxCount is how many skills the folder may hold.
	MaxCount int
	// MaxBytes bounds one skill's source, in bytes.
	MaxBytes int
}

// DefaultLimits are 100 skills of at most 64 KiB each.
func DefaultLimits() Limits { return Limits{MaxCount: 100, MaxBytes: 64 << 10} }

// Skill is one saved skill.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Signature is the function's, when a function was saved, e.g.
	// "(path, limit=10)"; empty for a module saved from source.
	Signature string `json:"signature,omitempty"`
	// Servers are the upstream servers its code calls, as far as a look at
	// the source can tell.
	Servers []string  `json:"servers,omitempty"`
	Saved   time.Time `json:"saved"`
	// SavedBy says who saved it, as far as the bridge knew; nil for a
	// skill saved before the bridge recorded it, or by other means.
	SavedBy *Origin `json:"saved_by,omitempty"`
	Source  string  `json:"source"`
}

// Origin is who saved a skill: the MCP client of the run (the name and
// version it gave), and the run.
type Origin struct {
	Client string `json:"client,omitempty"`
	Run    string `json:"run,omitempty"`
}

// String is the origin for people, e.g. "claude-code 1.2, run 4f2a".
func (o *Origin) String() string {
	if o == nil {
		return "unknown"
	}
	client := o.Client
	if client == "" {
		client = "an unnamed client"
	}
	if o.Run == "" {
		return client
	}
	return client + ", run " + o.Run
}

// Bounds of what a skill says of itself, in bytes and entries.
const (
	maxDescription = 1 << 10
	maxSignature   = 512
	maxServers     = 64
	maxServerName  = 256
)

// fileSuffix names a skill's file: NAME.skill.json.
const fileSuffix = ".skill.json"

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// ErrExists is Save's error for a name taken, without overwrite.
var ErrExists = errors.New("a skill of that name exists")

// ErrNotFound is the error for a name no skill has.
var ErrNotFound = errors.New("no such skill")

// ErrInvalid wraps what Check and CheckName find wrong with a skill (but
// a source over the size cap, which is ErrTooLarge).
var ErrInvalid = errors.New("invalid skill")

// invalidf is an error that wraps ErrInvalid, printed without it.
func invalidf(format string, args ...any) error {
	return invalidError{fmt.Sprintf(format, args...)}
}

type invalidError struct{ msg string }

func (e invalidError) Error() string      { return e.msg }
func (invalidError) Is(target error) bool { return target == ErrInvalid }

// CheckName says what is wrong with name as a skill's name, or nil. A
// skill saved under a name that is now reserved (an older bridge reserved
// fewer) can still be read, imported and removed: only a save checks
// [CheckNewName].
func CheckName(name string) error {
	switch {
	case name == "":
		return invalidf("a skill needs a name")
	case !namePattern.MatchString(name):
		return invalidf("skill name %q is not valid: 1 to 64 lower-case letters, digits and '_', starting with a letter", clip(name, 80))
	}
	return nil
}

// CheckNewName is CheckName for a skill about to be saved: also not a name
// Python, the standard images or the bridge already give a meaning.
func CheckNewName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if reserved[name] {
		return invalidf("skill name %q is taken by Python (a keyword, a built-in or a module of its standard library), the data-science image's packages or mcp_tools: `from skills import %s` would read as the other: pick another", name, name)
	}
	return nil
}

// Check says what is wrong with s as a skill to save under lim, or nil.
func Check(s Skill, lim Limits) error {
	if err := CheckNewName(s.Name); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(s.Source) == "":
		return invalidf("the skill's source is empty")
	case len(s.Source) > lim.MaxBytes:
		return fmt.Errorf("%w: %d bytes, over the %d a skill may have (skills.max_bytes)", ErrTooLarge, len(s.Source), lim.MaxBytes)
	case !utf8.ValidString(s.Source):
		return invalidf("the skill's source is not UTF-8 text")
	case strings.IndexFunc(s.Source, badInSource) >= 0:
		return invalidf("the skill's source holds a control character (such as NUL or ESC) outside a tab or line end: write it as an escape in a string, e.g. \\x1b")
	case strings.IndexFunc(s.Source, Hidden) >= 0:
		r := []rune(s.Source)[runeIndex(s.Source, Hidden)]
		return invalidf("the skill's source holds an invisible or bidi control character (U+%04X): it can make what a reviewer reads differ from what runs; write it as an escape in a string, e.g. \\u%04x", r, r)
	case len(s.Description) > maxDescription || !plainText(s.Description):
		return invalidf("the description must be at most %d bytes of UTF-8 text without control characters", maxDescription)
	case len(s.Signature) > maxSignature || !plainText(s.Signature):
		return invalidf("the signature must be at most %d bytes of UTF-8 text without control characters", maxSignature)
	case len(s.Servers) > maxServers:
		return invalidf("a skill lists at most %d servers", maxServers)
	case s.SavedBy != nil && (len(s.SavedBy.Client) > maxServerName || !plainText(s.SavedBy.Client) || len(s.SavedBy.Run) > 64 || !plainText(s.SavedBy.Run)):
		return invalidf("who saved a skill must be at most %d bytes of text", maxServerName)
	}
	for _, srv := range s.Servers {
		if srv == "" || len(srv) > maxServerName || !plainText(srv) {
			return invalidf("a server a skill calls must be a name of 1 to %d bytes of text", maxServerName)
		}
	}
	return nil
}

// badInSource reports the characters a skill's source may not hold: the
// C0 and C1 controls and DEL, but tab, line feed, carriage return and form
// feed. They would reach the operator's terminal through `bridge skills
// show` and could hide lines from the review it is for.
func badInSource(r rune) bool {
	switch r {
	case '\t', '\n', '\r', '\f':
		return false
	}
	return unicode.IsControl(r)
}

// plainText is UTF-8 without any control, invisible or bidi character.
func plainText(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0 && strings.IndexFunc(s, Hidden) < 0
}

// Hidden reports the characters that change how text is shown without
// being seen: Unicode's format characters (bidi embeddings, overrides and
// isolates, zero-width spaces and joiners, the BOM, tag characters), the
// line and paragraph separators, and a few more that render as nothing.
// In a skill's source they let what a reviewer reads differ from what
// runs (Trojan Source); in a description they hide instructions.
func Hidden(r rune) bool {
	switch {
	case r == '\u2028', r == '\u2029', r == '\u115f', r == '\u1160', r == '\u3164', r == '\uffa0', r == '\u180e', r == '\u034f':
		return true
	case r >= '\ufe00' && r <= '\ufe0f', r >= 0xe0100 && r <= 0xe01ef, r >= '\u180b' && r <= '\u180d':
		return true // variation selectors: invisible, and able to carry hidden text
	}
	return unicode.Is(unicode.Cf, r)
}

// runeIndex is the index, in runes, of the first rune of s for which f is
// true, or -1.
func runeIndex(s string, f func(rune) bool) int {
	i := 0
	for _, r := range s {
		if f(r) {
			return i
		}
		i++
	}
	return -1
}

// Store is a folder of skills. It is safe for concurrent use, and for
// several processes: a save is one rename (or one link, without
// overwrite), so a reader sees a whole skill or none.
type Store struct {
	dir    string
	limits Limits
	mu     sync.Mutex // serializes saves of this process (the count cap)
}

// Open returns the store in dir. The folder need not exist: it reads as
// empty, and the first Save creates it (mode 0700).
func Open(dir string, lim Limits) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("the skills folder %q is not an absolute path", dir)
	}
	if lim.MaxCount <= 0 || lim.MaxBytes <= 0 {
		return nil, fmt.Errorf("skills limits must be positive, got %+v", lim)
	}
	return &Store{dir: filepath.Clean(dir), limits: lim}, nil
}

// Limits are the store's limits.
func (st *Store) Limits() Limits { return st.limits }

// Dir is the store's folder.
func (st *Store) Dir() string { return st.dir }

func (st *Store) path(name string) string { return filepath.Join(st.dir, name+fileSuffix) }

// ErrFull is Save's error when the folder holds MaxCount skills.
var ErrFull = errors.New("the skills folder is full")

// ErrTooLarge is Check's error for a source over MaxBytes.
var ErrTooLarge = errors.New("the skill's source is too large")

// Save writes s (s.Saved is set now) and says whether it replaced a skill.
// Without overwrite, a name taken is ErrExists; either way nothing is
// written unless s passes Check and the count cap, and a reader never sees
// half a file.
func (st *Store) Save(s Skill, overwrite bool) (replaced bool, err error) {
	if err := Check(s, st.limits); err != nil {
		return false, err
	}
	s.Saved = time.Now().UTC().Truncate(time.Second)
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return false, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.checkDir(); err != nil {
		return false, err
	}
	final := st.path(s.Name)
	_, statErr := os.Lstat(final)
	exists := statErr == nil
	if exists && !overwrite {
		return false, fmt.Errorf("%w: %q (pass overwrite=True to replace it)", ErrExists, s.Name)
	}
	if !exists {
		names, err := st.names()
		if err != nil {
			return false, err
		}
		if len(names) >= st.limits.MaxCount {
			return false, fmt.Errorf("%w: %d of %d (skills.max_count): remove one with `bridge skills rm NAME`, or raise the limit", ErrFull, len(names), st.limits.MaxCount)
		}
	}
	if err := os.MkdirAll(st.dir, 0o700); err != nil {
		return false, fmt.Errorf("creating the skills folder: %w", err)
	}
	tmp, err := os.CreateTemp(st.dir, ".save-*")
	if err != nil {
		return false, fmt.Errorf("saving the skill: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("saving the skill: %w", err)
	}
	if overwrite {
		err = os.Rename(tmp.Name(), final)
	} else {
		// A link fails if the name exists: of two processes saving the
		// same name, exactly one wins.
		err = os.Link(tmp.Name(), final)
		if errors.Is(err, os.ErrExist) {
			return false, fmt.Errorf("%w: %q (pass overwrite=True to replace it)", ErrExists, s.Name)
		}
	}
	if err != nil {
		return false, fmt.Errorf("saving the skill: %w", err)
	}
	return exists, nil
}

// checkDir refuses a folder another user owns, or that its group or
// others may write (they could plant or replace skills every run
// imports), as artifacts.dir is checked. A folder that does not exist
// yet is fine: Save makes it, mode 0700.
func (st *Store) checkDir() error {
	var fs syscall.Stat_t
	err := syscall.Lstat(st.dir, &fs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("the skills folder %s: %w", st.dir, err)
	case fs.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return fmt.Errorf("the skills folder %s is not a folder (a symbolic link, or a file): name a folder (skills.dir)", st.dir)
	case int(fs.Uid) != os.Geteuid():
		return fmt.Errorf("the skills folder %s belongs to uid %d, not to this user (uid %d): name a folder of your own (skills.dir)", st.dir, fs.Uid, os.Geteuid())
	case fs.Mode&0o022 != 0:
		return fmt.Errorf("the skills folder %s is writable by its group or others (mode %04o): anyone who can write there can change what every run imports; chmod 700 it", st.dir, fs.Mode&0o7777)
	}
	return nil
}

// Get reads the skill name.
func (st *Store) Get(name string) (Skill, error) {
	if err := CheckName(name); err != nil {
		return Skill{}, err
	}
	if err := st.checkDir(); err != nil {
		return Skill{}, err
	}
	data, err := st.read(st.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return Skill{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return Skill{}, err
	}
	var s Skill
	if err := json.Unmarshal(data, &s); err != nil || s.Name != name {
		return Skill{}, fmt.Errorf("the skill file %s is damaged: remove it with `bridge skills rm %s`", st.path(name), name)
	}
	return s, nil
}

// maxFile bounds the bytes read of one skill's file: a source at the
// largest cap, JSON-escaped, with room for the rest.
const maxFile = 6<<20 + 64<<10

// read reads a skill's file: a regular file, not a link (nor a FIFO that
// would block), of at most maxFile bytes.
func (st *Store) read(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link, not a skill's file: remove it", path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxFile {
		return nil, fmt.Errorf("%s is not a skill's file (not a regular file, or over %d bytes): remove it", path, maxFile)
	}
	return io.ReadAll(io.LimitReader(f, maxFile))
}

// List returns every skill, by name, without its source.
func (st *Store) List() ([]Skill, error) {
	if err := st.checkDir(); err != nil {
		return nil, err
	}
	names, err := st.names()
	if err != nil {
		return nil, err
	}
	out := make([]Skill, 0, len(names))
	for _, n := range names {
		s, err := st.Get(n)
		if err != nil {
			continue // damaged, or removed meanwhile
		}
		s.Source = ""
		out = append(out, s)
	}
	return out, nil
}

// Remove deletes the skill name.
func (st *Store) Remove(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	err := os.Remove(st.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return err
}

// names are the skills' names, sorted.
func (st *Store) names() ([]string, error) {
	entries, err := os.ReadDir(st.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing saved yet
	}
	if err != nil {
		return nil, fmt.Errorf("reading the skills folder: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), fileSuffix); ok && e.Type().IsRegular() && namePattern.MatchString(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// reserved are the names a skill may not take: Python's keywords and
// built-ins, the standard library's modules (Python 3.11, lower-case,
// public), the top-level modules of the data-science image's packages and
// the bridge's own names. Tests hold the built-ins and the standard
// library's list equal to the runner's Python. The runner also refuses the
// name of any module its image has (save_skill): an image built with more
// packages is known only there.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(keywords + " " + builtinNames + " " + stdlibModules + " " + packageModules + " " + bridgeModules) {
		m[n] = true
	}
	return m
}()

const keywords = "and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield"

// bridgeModules are the bridge's modules, and the built-in the runner adds.
const bridgeModules = "mcp_tools skills display"

// builtinNames are Python 3.11's built-ins (lower-case, public):
// `from skills import print` would shadow print.
const builtinNames = `
	abs aiter all anext any ascii bin bool breakpoint bytearray bytes callable chr classmethod
	compile complex copyright credits delattr dict dir divmod enumerate eval exec exit filter
	float format frozenset getattr globals hasattr hash help hex id input int isinstance
	issubclass iter len license list locals map max memoryview min next object oct open ord
	pow print property quit range repr reversed round set setattr slice sorted staticmethod
	str sum super tuple type vars zip
`

// packageModules are the top-level modules of the data-science image's
// packages (Dockerfile.runner) and of what they pull in, lower-case.
const packageModules = `
	numpy pandas matplotlib scipy sklearn openpyxl tabulate jinja2 markupsafe joblib
	threadpoolctl dateutil pytz six kiwisolver cycler pyparsing packaging
	et_xmlfile bottleneck numexpr tz
`

const stdlibModules = `
	abc aifc antigravity argparse array ast asynchat asyncio asyncore atexit audioop base64
	bdb binascii bisect builtins bz2 calendar cgi cgitb chunk cmath cmd code codecs codeop
	collections colorsys compileall concurrent configparser contextlib contextvars copy
	copyreg crypt csv ctypes curses dataclasses datetime dbm decimal difflib dis distutils
	doctest email encodings ensurepip enum errno faulthandler fcntl filecmp fileinput fnmatch
	fractions ftplib functools gc genericpath getopt getpass gettext glob graphlib grp gzip
	hashlib heapq hmac html http idlelib imaplib imghdr imp importlib inspect io ipaddress
	itertools json keyword lib2to3 linecache locale logging lzma mailbox mailcap marshal math
	mimetypes mmap modulefinder msilib msvcrt multiprocessing netrc nis nntplib nt ntpath
	nturl2path numbers opcode operator optparse os ossaudiodev pathlib pdb pickle pickletools
	pipes pkgutil platform plistlib poplib posix posixpath pprint profile pstats pty pwd
	py_compile pyclbr pydoc pydoc_data pyexpat queue quopri random re readline reprlib
	resource rlcompleter runpy sched secrets select selectors shelve shlex shutil signal site
	smtpd smtplib sndhdr socket socketserver spwd sqlite3 sre_compile sre_constants sre_parse
	ssl stat statistics string stringprep struct subprocess sunau symtable sys sysconfig
	syslog tabnanny tarfile telnetlib tempfile termios textwrap this threading time timeit
	tkinter token tokenize tomllib trace traceback tracemalloc tty turtle turtledemo types
	typing unicodedata unittest urllib uu uuid venv warnings wave weakref webbrowser winreg
	winsound wsgiref xdrlib xml xmlrpc zipapp zipfile zipimport zlib zoneinfo
`
