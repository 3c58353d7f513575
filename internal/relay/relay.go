// Package relay implements the bridge's side of the relay protocol: the
// framing and the messages exchanged with the runner over the per-run unix
// socket. Everything read here comes from the sandbox and is treated as
// hostile: sizes are bounded, types and fields are checked strictly.
// The protocol is documented in docs/protocol.md.
package relay

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Version is the relay protocol version this package speaks.
const Version = 5

// MaxFrameSize is the largest payload a frame may carry, in bytes.
const MaxFrameSize = 16 << 20

// MaxResultBytes is the default bound on one tool result sent to the
// runner, as JSON: half a frame, leaving room for the frame's own fields.
const MaxResultBytes = 8 << 20

// Message types.
const (
	TypeHello      = "hello"
	TypeStdout     = "stdout"
	TypeStderr     = "stderr"
	TypeToolCall   = "tool_call"
	TypeQuery      = "query"
	TypeExit       = "exit"
	TypeExec       = "exec"
	TypeInterrupt  = "interrupt"
	TypeToolResult = "tool_result"
	TypeFile       = "file"
	TypeFileData   = "file_data"
	TypeFileEnd    = "file_end"
	TypeFileSkip   = "file_skip"
)

// ErrProtocol is wrapped by every error caused by a malformed frame.
var ErrProtocol = errors.New("relay protocol error")

// Hello is the runner's first message.
type Hello struct {
	Version int    `json:"version"`
	Token   string `json:"token"`
	Python  string `json:"python"`
}

// Output is a piece of the code's stdout or stderr.
type Output struct {
	Data string `json:"data"`
}

// ToolCall is a request from the code to call an upstream tool.
type ToolCall struct {
	ID     int64           `json:"id"`
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
}

// Query asks the bridge about the tools the code may use (which servers
// there are, a server's tools, a search across them and the skills), or
// has it save a skill: one of the Op constants.
type Query struct {
	ID   int64           `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

// The operations a Query may ask for.
const (
	OpServers = "servers"
	OpTools   = "tools"
	OpSearch  = "search"
	// OpSkills lists the saved skills, OpSkillSource reads one, and
	// OpSaveSkill saves one (docs/protocol.md, "Skills").
	OpSkills      = "skills"
	OpSkillSource = "skill_source"
	OpSaveSkill   = "save_skill"
)

// IsQueryOp reports whether op is an operation a Query may ask for.
func IsQueryOp(op string) bool {
	switch op {
	case OpServers, OpTools, OpSearch, OpSkills, OpSkillSource, OpSaveSkill:
		return true
	}
	return false
}

// ErrorInfo describes an exception raised by the code. As decoded, Type is
// at most 256 bytes, and Message and Traceback keep at most 64 KiB of their
// head and tail (see clip).
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// Exit is the runner's last message.
type Exit struct {
	Status    string     `json:"status"`
	ExitCode  int        `json:"exit_code"`
	Error     *ErrorInfo `json:"error,omitempty"`
	StdoutCut int64      `json:"stdout_cut"`
	StderrCut int64      `json:"stderr_cut"`
	// FilesSkipped counts the files skipped beyond those reported one by
	// one with file_skip.
	FilesSkipped int64 `json:"files_skipped"`
}

// File announces one file of the outputs folder; its bytes follow in
// FileData frames and a FileEnd. As decoded, Name is a relative path of
// 1 to MaxFileName bytes whose "/"-separated parts are not empty, "." or
// "..", are at most 255 bytes each, and hold no NUL.
type File struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// FileData is the next piece of the file being sent: 1 byte to
// MaxFilePiece, base64 on the wire.
type FileData struct {
	ID   int64  `json:"id"`
	Data []byte `json:"data"`
}

// FileEnd ends the file being sent.
type FileEnd struct {
	ID int64 `json:"id"`
	// Status is FileComplete, FileChanged or FileUnreadable.
	Status string `json:"status"`
}

// The statuses of a FileEnd.
const (
	FileComplete   = "complete"
	FileChanged    = "changed"
	FileUnreadable = "unreadable"
)

// FileSkip reports a file the runner did not send. Reason is one of
// SkipReasons; Name is checked as File's, except for reason bad_name,
// where it is only cut to 256 bytes.
type FileSkip struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Reason string `json:"reason"`
}

// SkipReasons are the reasons a FileSkip may give.
var SkipReasons = []string{"symlink", "special", "too_large", "over_total", "too_many", "unreadable", "bad_name"}

// Bounds of the files out.
const (
	// MaxFileName is the longest name of a file, in bytes.
	MaxFileName = 1024
	// MaxFilePiece is the most bytes one FileData carries.
	MaxFilePiece = 1 << 20
	// MaxFileSkips is how many FileSkip frames one execution may send.
	MaxFileSkips = 100
)

// FileLimits are what exec tells the runner of the files it may send.
type FileLimits struct {
	MaxFiles     int   `json:"max_files"`
	MaxFileBytes int64 `json:"max_file_bytes"`
	MaxBytes     int64 `json:"max_bytes"`
}

// Exec hands the code to the runner.
type Exec struct {
	Version     int        `json:"version"`
	Code        string     `json:"code"`
	OutputLimit int        `json:"output_limit"`
	Files       FileLimits `json:"files"`
	// Session keeps the interpreter after the code ends: the runner sends
	// exit without hanging up and waits for the next exec (docs/protocol.md).
	Session bool `json:"session,omitempty"`
}

// ToolError is the error half of a ToolResult.
type ToolError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// The error types of a ToolResult.
const (
	ErrToolsUnavailable = "tools_unavailable" // no proxy, or no upstream servers
	ErrUnknownServer    = "unknown_server"
	ErrUnknownTool      = "unknown_tool"
	ErrDenied           = "denied"   // policy refused the call
	ErrLimit            = "limit"    // a budget or size limit was reached
	ErrUpstream         = "upstream" // the upstream failed, crashed or is unreachable
	ErrTimeout          = "timeout"  // the call ran past its timeout
	ErrInvalid          = "invalid"  // the request itself is wrong (bad query arguments)
	// The skill operations' own errors.
	ErrUnknownSkill      = "unknown_skill"      // no skill has that name
	ErrSkillExists       = "skill_exists"       // a save without overwrite found the name taken
	ErrSkillsUnavailable = "skills_unavailable" // the skills folder cannot be read or written
)

// ToolResult answers a ToolCall or a Query. Exactly one of Result and Error is set.
type ToolResult struct {
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ToolError      `json:"error,omitempty"`
}

// Message is one decoded frame from the runner: Type says which one of the
// pointers is set.
type Message struct {
	Type     string
	Hello    *Hello
	Output   *Output // for TypeStdout and TypeStderr
	ToolCall *ToolCall
	Query    *Query
	Exit     *Exit
	File     *File
	FileData *FileData
	FileEnd  *FileEnd
	FileSkip *FileSkip
}

// Decoder reads frames from the runner.
type Decoder struct {
	r   io.Reader
	max int
	hdr [4]byte
	buf []byte
}

// NewDecoder returns a Decoder that refuses frames larger than maxFrame
// bytes (MaxFrameSize when maxFrame is 0 or larger than MaxFrameSize).
func NewDecoder(r io.Reader, maxFrame int) *Decoder {
	if maxFrame <= 0 || maxFrame > MaxFrameSize {
		maxFrame = MaxFrameSize
	}
	return &Decoder{r: r, max: maxFrame}
}

// Decode reads and checks the next frame. It returns io.EOF when the peer
// closed the connection cleanly between frames, and an error wrapping
// ErrProtocol for anything malformed.
func (d *Decoder) Decode() (Message, error) {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Message{}, fmt.Errorf("%w: connection closed inside a frame header", ErrProtocol)
		}
		return Message{}, err
	}
	n := binary.BigEndian.Uint32(d.hdr[:])
	if n == 0 || n > uint32(d.max) {
		return Message{}, fmt.Errorf("%w: frame of %d bytes (allowed 1 to %d)", ErrProtocol, n, d.max)
	}
	if cap(d.buf) < int(n) {
		d.buf = make([]byte, n)
	}
	payload := d.buf[:n]
	if n > maxKeptBuffer {
		// A frame this large is rare (the runner sends output in 64 KiB
		// pieces, files in 1 MiB ones, 1.4 MB as base64): its buffer is
		// not kept for the next one.
		d.buf = nil
	}
	if _, err := io.ReadFull(d.r, payload); err != nil {
		return Message{}, fmt.Errorf("%w: connection closed inside a frame: %v", ErrProtocol, err)
	}
	return ParsePayload(payload)
}

// Bounds on what the runner's messages carry, in bytes.
const (
	// maxKeptBuffer is the largest frame buffer a Decoder keeps for the
	// next frame.
	maxKeptBuffer = 2 << 20
	maxToken      = 256 // hello.token; longer is a protocol error
	maxPython     = 64  // hello.python; longer is a protocol error
	maxName       = 256 // tool_call.server and tool_call.tool; longer is a protocol error
	maxErrorType  = 256 // exit's error.type is cut to this
	// maxErrorText bounds exit's error.message and error.traceback: a longer
	// text keeps its first and last maxErrorText/2 bytes around a marker
	// saying how many bytes were cut (see clip).
	maxErrorText = 64 << 10
	// errorTextSlack lets a text of maxErrorText bytes plus a marker through
	// unchanged: the runner cuts these fields the same way before sending
	// them, and cutting its output again would replace its marker (which
	// counts what it cut) with one counting only the marker's own bytes.
	errorTextSlack = 64
	// maxDepth is encoding/json's bound on the nesting of objects and
	// arrays in a payload, the top-level object included.
	maxDepth = 10000
)

// keys lists the keys an object must and may have. Keys are matched
// exactly: case matters, and each may appear once.
type keys struct{ required, optional []string }

func (k keys) has(key string) bool {
	return slices.Contains(k.required, key) || slices.Contains(k.optional, key)
}

var (
	// The keys of each message from the runner, and of exit's error object.
	messageKeys = map[string]keys{
		TypeHello:    {required: []string{"type", "version", "token", "python"}},
		TypeStdout:   {required: []string{"type", "data"}},
		TypeStderr:   {required: []string{"type", "data"}},
		TypeToolCall: {[]string{"type", "id", "server", "tool"}, []string{"args"}},
		TypeQuery:    {required: []string{"type", "id", "op", "args"}},
		TypeExit:     {[]string{"type", "status", "exit_code"}, []string{"error", "stdout_cut", "stderr_cut", "files_skipped"}},
		TypeFile:     {required: []string{"type", "id", "name", "size"}},
		TypeFileData: {required: []string{"type", "id", "data"}},
		TypeFileEnd:  {required: []string{"type", "id", "status"}},
		TypeFileSkip: {required: []string{"type", "name", "size", "reason"}},
	}
	errorKeys = keys{[]string{"type", "message"}, []string{"traceback"}}

	// The JSON type of each key's value: "string", "object" or "integer" (a
	// number without fraction or exponent, in int64's range). Never null.
	valueKinds = map[string]string{
		"type": "string", "version": "integer", "token": "string", "python": "string",
		"data": "string", "id": "integer", "server": "string", "tool": "string", "args": "object", "op": "string",
		"status": "string", "exit_code": "integer", "error": "object", "stdout_cut": "integer", "stderr_cut": "integer",
		"files_skipped": "integer", "name": "string", "size": "integer", "reason": "string",
	}
	errorKinds = map[string]string{"type": "string", "message": "string", "traceback": "string"}
)

// ParsePayload decodes one frame's payload: a JSON object whose keys are
// exactly those its type allows (case-sensitive, each at most once, the
// required ones present), with values of the right JSON type and in range.
// The result shares no memory with payload.
func ParsePayload(payload []byte) (Message, error) {
	if m, ok, err := parseFileData(payload); ok {
		return m, err
	}
	return parsePayload(payload)
}

// fileDataHead and fileDataMid are file_data as the runner writes it.
var (
	fileDataHead = []byte(`{"type":"file_data","id":`)
	fileDataMid  = []byte(`,"data":"`)
)

// parseFileData decodes file_data written exactly as the runner writes it
// (these keys, in this order, no spaces, a plain integer id, the data in
// the base64 alphabet alone) straight from the payload: the generic path
// reads a megabyte piece three times over (12 ms a MiB). ok false means the
// payload is not of that shape, and the generic path decides. What this
// accepts, the generic path accepts with the same result (FuzzDecode
// checks).
func parseFileData(p []byte) (m Message, ok bool, err error) {
	rest, found := bytes.CutPrefix(p, fileDataHead)
	if !found {
		return Message{}, false, nil
	}
	i := 0
	for i < len(rest) && i < 19 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || (rest[0] == '0' && i > 1) {
		return Message{}, false, nil
	}
	id, perr := strconv.ParseInt(string(rest[:i]), 10, 64)
	if perr != nil {
		return Message{}, false, nil
	}
	rest, found = bytes.CutPrefix(rest[i:], fileDataMid)
	if !found || len(rest) < 2 || rest[len(rest)-2] != '"' || rest[len(rest)-1] != '}' {
		return Message{}, false, nil
	}
	b64 := rest[:len(rest)-2]
	// base64's decoder skips \r and \n, which JSON does not allow raw in
	// a string; anything else outside the alphabet fails to decode.
	if bytes.ContainsAny(b64, "\r\n") {
		return Message{}, false, nil
	}
	data := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, derr := base64.StdEncoding.Decode(data, b64)
	if derr != nil {
		return Message{}, false, nil
	}
	d := &FileData{ID: id, Data: data[:n]}
	if err := d.check(); err != nil {
		return Message{}, true, fmt.Errorf("%w: %s: %v", ErrProtocol, TypeFileData, err)
	}
	return Message{Type: TypeFileData, FileData: d}, true, nil
}

// parsePayload is ParsePayload's generic path.
func parsePayload(payload []byte) (Message, error) {
	o, err := readObject(payload, valueKinds)
	if err != nil {
		return Message{}, fmt.Errorf("%w: payload is not a JSON object: %v", ErrProtocol, err)
	}
	var typ string
	if v, ok := o.values["type"]; ok {
		if err = checkKind("type", "string", v); err == nil {
			err = json.Unmarshal(v, &typ)
		}
		if err != nil {
			return Message{}, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
	}
	k, ok := messageKeys[typ]
	switch {
	case typ == "":
		return Message{}, fmt.Errorf("%w: frame without a type", ErrProtocol)
	case !ok:
		return Message{}, fmt.Errorf("%w: unknown message type %q", ErrProtocol, truncate(typ, 40))
	}
	m := Message{Type: typ}
	var dst checker
	switch typ {
	case TypeHello:
		m.Hello = new(Hello)
		dst = m.Hello
	case TypeStdout, TypeStderr:
		m.Output = new(Output)
		dst = m.Output
	case TypeToolCall:
		m.ToolCall = new(ToolCall)
		dst = m.ToolCall
	case TypeQuery:
		m.Query = new(Query)
		dst = m.Query
	case TypeExit:
		m.Exit = new(Exit)
		dst = m.Exit
	case TypeFile:
		m.File = new(File)
		dst = m.File
	case TypeFileData:
		m.FileData = new(FileData)
		dst = m.FileData
	case TypeFileEnd:
		m.FileEnd = new(FileEnd)
		dst = m.FileEnd
	case TypeFileSkip:
		m.FileSkip = new(FileSkip)
		dst = m.FileSkip
	}
	if err := o.decode(k, payload, dst); err != nil {
		return Message{}, fmt.Errorf("%w: %s: %v", ErrProtocol, typ, err)
	}
	return m, nil
}

// checker is a message part that can check its bounds.
type checker interface{ check() error }

// decode checks the keys and the values' JSON types of o, read from
// payload, then unmarshals payload into dst and checks its bounds. The
// checks leave json.Unmarshal nothing to be lenient about: its
// case-insensitive key matching finds exact names, each once, and no null.
func (o *object) decode(k keys, payload []byte, dst checker) error {
	if err := o.checkKeys(k); err != nil {
		return err
	}
	if err := o.checkKinds(""); err != nil {
		return err
	}
	if v, ok := o.values["error"]; ok {
		e, err := readObject(v, errorKinds)
		if err == nil {
			err = e.checkKeys(errorKeys)
		}
		if err != nil {
			return fmt.Errorf("error: %v", err)
		}
		if err := e.checkKinds("error."); err != nil {
			return err
		}
	}
	// This also checks the nesting of the whole payload, which the Decoder
	// in readObject bounds only per value.
	if err := json.Unmarshal(payload, dst); err != nil {
		return err
	}
	return dst.check()
}

func (*Output) check() error { return nil }

func (h *Hello) check() error {
	switch {
	case len(h.Token) > maxToken:
		return fmt.Errorf("token is %d bytes (at most %d)", len(h.Token), maxToken)
	case len(h.Python) > maxPython:
		return fmt.Errorf("python is %d bytes (at most %d)", len(h.Python), maxPython)
	}
	return nil
}

func (c *ToolCall) check() error {
	switch {
	case c.ID <= 0:
		return fmt.Errorf("id must be a positive integer, got %d", c.ID)
	case c.Server == "" || len(c.Server) > maxName:
		return fmt.Errorf("server must be 1 to %d bytes", maxName)
	case c.Tool == "" || len(c.Tool) > maxName:
		return fmt.Errorf("tool must be 1 to %d bytes", maxName)
	}
	if c.Args == nil {
		c.Args = json.RawMessage("{}")
	}
	return nil
}

func (q *Query) check() error {
	switch {
	case q.ID <= 0:
		return fmt.Errorf("id must be a positive integer, got %d", q.ID)
	case !IsQueryOp(q.Op):
		return fmt.Errorf("op must be %s, %s, %s, %s, %s or %s, got %q", OpServers, OpTools, OpSearch, OpSkills, OpSkillSource, OpSaveSkill, truncate(q.Op, 40))
	}
	return nil
}

// check checks e's bounds and cuts its error's fields to size.
func (e *Exit) check() error {
	switch {
	case e.Status != "ok" && e.Status != "error":
		return fmt.Errorf("status must be ok or error, got %q", truncate(e.Status, 40))
	case e.ExitCode < 0 || e.ExitCode > 255:
		return fmt.Errorf("exit_code must be 0 to 255, got %d", e.ExitCode)
	case e.StdoutCut < 0 || e.StderrCut < 0 || e.FilesSkipped < 0:
		return errors.New("cut counts must not be negative")
	case e.Status == "ok" && e.ExitCode != 0:
		return fmt.Errorf("status ok with exit code %d", e.ExitCode)
	}
	if x := e.Error; x != nil {
		x.Type = cutTail([]byte(x.Type), maxErrorType)
		x.Message, x.Traceback = clip([]byte(x.Message)), clip([]byte(x.Traceback))
	}
	return nil
}

func (f *File) check() error {
	switch {
	case f.ID <= 0:
		return fmt.Errorf("id must be a positive integer, got %d", f.ID)
	case f.Size < 0:
		return fmt.Errorf("size must not be negative, got %d", f.Size)
	}
	return CheckFileName(f.Name)
}

// CheckFileName reports why name is not a file name the runner may send:
// a relative path of 1 to MaxFileName bytes of UTF-8 whose "/"-separated
// parts are not empty, "." or "..", are at most 255 bytes, and hold no NUL.
func CheckFileName(name string) error {
	switch {
	case name == "" || len(name) > MaxFileName:
		return fmt.Errorf("name must be 1 to %d bytes, got %d", MaxFileName, len(name))
	case !utf8.ValidString(name):
		return errors.New("name is not UTF-8")
	case strings.IndexByte(name, 0) >= 0:
		return errors.New("name holds a NUL byte")
	}
	for part := range strings.SplitSeq(name, "/") {
		switch {
		case part == "" || part == "." || part == "..":
			return fmt.Errorf("name %q has an empty, . or .. part", truncate(name, 40))
		case len(part) > 255:
			return fmt.Errorf("name %q has a part over 255 bytes", truncate(name, 40))
		}
	}
	return nil
}

func (d *FileData) check() error {
	switch {
	case d.ID <= 0:
		return fmt.Errorf("id must be a positive integer, got %d", d.ID)
	case len(d.Data) == 0 || len(d.Data) > MaxFilePiece:
		return fmt.Errorf("data must be 1 to %d bytes, got %d", MaxFilePiece, len(d.Data))
	}
	return nil
}

func (e *FileEnd) check() error {
	switch {
	case e.ID <= 0:
		return fmt.Errorf("id must be a positive integer, got %d", e.ID)
	case e.Status != FileComplete && e.Status != FileChanged && e.Status != FileUnreadable:
		return fmt.Errorf("status must be %s, %s or %s, got %q", FileComplete, FileChanged, FileUnreadable, truncate(e.Status, 40))
	}
	return nil
}

func (s *FileSkip) check() error {
	switch {
	case s.Size < 0:
		return fmt.Errorf("size must not be negative, got %d", s.Size)
	case !slices.Contains(SkipReasons, s.Reason):
		return fmt.Errorf("reason must be one of %s, got %q", strings.Join(SkipReasons, ", "), truncate(s.Reason, 40))
	case s.Reason == "bad_name":
		if len(s.Name) > 256 {
			return fmt.Errorf("a bad name is cut to 256 bytes, got %d", len(s.Name))
		}
		return nil
	}
	return CheckFileName(s.Name)
}

// object holds the members of a JSON object read by readObject.
type object struct {
	keys    []string                   // the known keys, in order, each once
	values  map[string]json.RawMessage // their first values
	kinds   map[string]string          // the known keys, with their values' JSON types
	dup     *string                    // the first known key given twice
	unknown *string                    // the first key not known
}

// readObject reads the JSON object that is all of p with encoding/json's
// token stream, keeping only the members whose key is in kinds: an
// unknown key costs no memory. Keys are compared after unescaping, so an
// escaped duplicate is still one.
// maxKeys bounds the keys of one JSON object in a frame.
const maxKeys = 32

func readObject(p []byte, kinds map[string]string) (*object, error) {
	if json.Valid(p) {
		return scanObject(p, kinds)
	}
	// Words the error as encoding/json does.
	return decodeObject(p, kinds)
}

// scanObject is readObject for valid JSON: it finds the object's keys and
// values in place, so that a frame of megabytes is not copied once more
// per value (the values alias p, and live only while the frame is parsed).
func scanObject(p []byte, kinds map[string]string) (*object, error) {
	i := skipSpace(p, 0)
	if p[i] != '{' {
		return decodeObject(p, kinds) // not an object: words the refusal
	}
	o := &object{values: map[string]json.RawMessage{}, kinds: kinds}
	i = skipSpace(p, i+1)
	for n := 0; p[i] != '}'; n++ {
		if n == maxKeys {
			return nil, fmt.Errorf("more than %d fields", maxKeys)
		}
		end := skipString(p, i)
		var key string
		if err := json.Unmarshal(p[i:end], &key); err != nil {
			return nil, err
		}
		i = skipSpace(p, skipSpace(p, end)+1) // past the colon
		end = skipValue(p, i)
		v := json.RawMessage(p[i:end:end])
		o.add(key, v)
		if i = skipSpace(p, end); p[i] == ',' {
			i = skipSpace(p, i+1)
		}
	}
	return o, nil
}

// add records one key of the object: the first unknown key, the first
// key given twice, and the value of each known key.
func (o *object) add(key string, v json.RawMessage) {
	_, seen := o.values[key]
	switch _, known := o.kinds[key]; {
	case !known && o.unknown == nil:
		o.unknown = &key
	case known && !seen:
		o.keys = append(o.keys, key)
		o.values[key] = v
	case seen && o.dup == nil:
		o.dup = &key
	}
}

// The skip functions walk valid JSON: each returns the index just past
// what starts at p[i].
func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n') {
		i++
	}
	return i
}

func skipString(p []byte, i int) int {
	for i++; p[i] != '"'; i++ {
		if p[i] == '\\' {
			i++
		}
	}
	return i + 1
}

func skipValue(p []byte, i int) int {
	switch p[i] {
	case '"':
		return skipString(p, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch p[i] {
			case '"':
				i = skipString(p, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(p) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(p[i])) {
		i++
	}
	return i
}

// decodeObject is readObject with encoding/json's Decoder, which says what
// is wrong with invalid JSON.
func decodeObject(p []byte, kinds map[string]string) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(p))
	if tok, err := dec.Token(); err != nil {
		return nil, syntaxError(err)
	} else if tok != json.Delim('{') {
		return nil, fmt.Errorf("found a JSON %s", kind(bytes.TrimLeft(p, " \t\r\n")))
	}
	o := &object{values: map[string]json.RawMessage{}, kinds: kinds}
	for n := 0; dec.More(); n++ {
		// No message has more than a handful of keys; a flood of them is
		// refused before it costs more than a glance.
		if n == maxKeys {
			return nil, fmt.Errorf("more than %d fields", maxKeys)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err)
		}
		key, _ := tok.(string) // the Decoder allows only strings here
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, syntaxError(err)
		}
		o.add(key, v)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(err)
	}
	if rest := bytes.TrimLeft(p[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("trailing data after the JSON object at offset %d", len(p)-len(rest))
	}
	return o, nil
}

// syntaxError words the Decoder's errors for a cut payload as
// json.Unmarshal does.
func syntaxError(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("unexpected end of JSON input")
	}
	return err
}

// checkKeys reports a key not in k, a key given twice, or a required key
// that is missing.
func (o *object) checkKeys(k keys) error {
	if o.unknown != nil {
		return fmt.Errorf("unknown field %q", truncate(*o.unknown, 40))
	}
	for _, key := range o.keys {
		if !k.has(key) {
			return fmt.Errorf("unknown field %q", key)
		}
	}
	if o.dup != nil {
		return fmt.Errorf("duplicate field %q", *o.dup)
	}
	for _, key := range k.required {
		if _, ok := o.values[key]; !ok {
			return fmt.Errorf("missing field %q", key)
		}
	}
	return nil
}

// checkKinds reports a value not of its key's JSON type, naming the key
// after prefix.
func (o *object) checkKinds(prefix string) error {
	for _, key := range o.keys {
		if err := checkKind(prefix+key, o.kinds[key], o.values[key]); err != nil {
			return err
		}
	}
	return nil
}

// checkKind reports a value v of name that is not of JSON type want.
func checkKind(name, want string, v []byte) error {
	got := kind(v)
	switch {
	case want == "integer" && got == "number":
		var n int64
		if json.Unmarshal(v, &n) == nil {
			return nil
		} else if bytes.ContainsAny(v, ".eE") {
			return fmt.Errorf("%s: %s is not an integer", name, truncate(string(v), 40))
		}
		return fmt.Errorf("%s: %s is out of range", name, truncate(string(v), 40))
	case got == want:
		return nil
	case name == "args":
		return fmt.Errorf("args must be a JSON object, got %s", got)
	case want == "string":
		return fmt.Errorf("%s: cannot unmarshal %s into a string", name, got)
	}
	return fmt.Errorf("%s: cannot unmarshal %s into an %s", name, got, want)
}

// kind names the JSON type of the JSON text v.
func kind(v []byte) string {
	if k, ok := kindNames[v[0]]; ok {
		return k
	}
	return "number"
}

var kindNames = map[byte]string{'"': "string", '{': "object", '[': "array", 't': "bool", 'f': "bool", 'n': "null"}

// clip returns s as a string, or, if s is longer than maxErrorText (plus
// errorTextSlack), its head and tail of at most maxErrorText/2 bytes each,
// cut at character boundaries, around a marker as the runner writes it:
// "\n[... N bytes cut ...]\n". s is valid UTF-8.
func clip(s []byte) string {
	if len(s) <= maxErrorText+errorTextSlack {
		return string(s)
	}
	h := maxErrorText / 2
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	t := len(s) - maxErrorText/2
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	b := make([]byte, 0, h+len(s)-t+40)
	b = append(b, s[:h]...)
	b = append(b, "\n[... "...)
	b = strconv.AppendInt(b, int64(t-h), 10)
	b = append(b, " bytes cut ...]\n"...)
	b = append(b, s[t:]...)
	return string(b)
}

// cutTail returns s as a string, or, if s is longer than n bytes, as much
// of its head as fits in n bytes with "..." (at a character boundary).
func cutTail(s []byte, n int) string {
	if len(s) <= n {
		return string(s)
	}
	k := n - len("...")
	for k > 0 && !utf8.RuneStart(s[k]) {
		k--
	}
	return string(s[:k]) + "..."
}

// truncate shortens s, which goes into an error message, to about n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Encoder writes frames to the runner. It is not safe for concurrent use;
// callers serialize writes.
type Encoder struct {
	w   io.Writer
	buf []byte // reused between frames
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Exec sends the exec message.
func (e *Encoder) Exec(m Exec) error {
	m.Version = Version
	return e.write(struct {
		Type string `json:"type"`
		Exec
	}{TypeExec, m})
}

// Interrupt sends the interrupt message: in a session, the runner raises
// KeyboardInterrupt in the running code.
func (e *Encoder) Interrupt() error {
	return e.write(struct {
		Type string `json:"type"`
	}{TypeInterrupt})
}

// ToolResult sends a tool_result message.
func (e *Encoder) ToolResult(m ToolResult) error { return e.write(toolResultFrame(m)) }

func (e *Encoder) write(v any) error {
	b, err := appendFrame(e.buf[:0], v)
	if err != nil {
		return err
	}
	e.buf = b
	_, err = e.w.Write(b)
	return err
}

// ErrFrameTooLarge is returned for a message that would not fit in one frame.
var ErrFrameTooLarge = errors.New("message exceeds the relay's frame limit")

// Frame is one complete frame, header included, in pieces to be written
// in order (as net.Buffers, which writes them with one system call).
type Frame [][]byte

// Len is the frame's size in bytes.
func (f Frame) Len() int {
	n := 0
	for _, b := range f {
		n += len(b)
	}
	return n
}

// ToolResultFrame returns m as one frame, ready to be written. It fails
// with ErrFrameTooLarge when the payload would exceed MaxFrameSize. Framing
// ahead of the write lets the caller know what an answer weighs before it
// waits for the connection. A result is not copied: the frame refers to
// m.Result, between a head and a tail of its own.
func ToolResultFrame(m ToolResult) (Frame, error) {
	if m.Error != nil || len(m.Result) == 0 {
		b, err := appendFrame(nil, toolResultFrame(m))
		return Frame{b}, err
	}
	// encoding/json would scan and compact the result once more, which for
	// a result of megabytes is most of the cost; json.Valid only scans.
	if !json.Valid(m.Result) {
		return nil, errors.New("tool result is not valid JSON")
	}
	head := `{"type":"` + TypeToolResult + `","id":` + strconv.FormatInt(m.ID, 10) + `,"result":`
	n := len(head) + len(m.Result) + 1
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes, allowed %d", ErrFrameTooLarge, n, MaxFrameSize)
	}
	b := make([]byte, 4, 4+len(head))
	binary.BigEndian.PutUint32(b, uint32(n))
	return Frame{append(b, head...), m.Result, []byte("}")}, nil
}

func toolResultFrame(m ToolResult) any {
	return struct {
		Type string `json:"type"`
		ToolResult
	}{TypeToolResult, m}
}

// appendFrame appends v's frame to dst.
func appendFrame(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	buf.Write([]byte{0, 0, 0, 0})
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	b = b[:len(b)-1] // Encode's trailing newline
	n := len(b) - len(dst) - 4
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes, allowed %d", ErrFrameTooLarge, n, MaxFrameSize)
	}
	binary.BigEndian.PutUint32(b[len(dst):len(dst)+4], uint32(n))
	return b, nil
}
