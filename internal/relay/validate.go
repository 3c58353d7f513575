package relay

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on what the runner's messages carry, in bytes.
const (
	// maxKeptBuffer is the largest frame buffer a [Decoder] keeps for the
	// next frame.
	maxKeptBuffer = 2 << 20
	maxToken      = 256 // hello.token; longer is a protocol error
	maxPython     = 64  // hello.python; longer is a protocol error
	maxParks      = 64  // hello.parks; more is a protocol error
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
		TypeHello:    {[]string{"type", "version", "token", "python"}, []string{"parks", "resumed"}},
		TypeParked:   {required: []string{"type"}},
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
		"parks": "integer", "resumed": "bool",
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
	case TypeParked:
		m.Parked = new(Parked)
		dst = m.Parked
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
	// This also checks the nesting of the whole payload, which the [Decoder]
	// in readObject bounds only per value.
	if err := json.Unmarshal(payload, dst); err != nil {
		return err
	}
	return dst.check()
}

func (*Output) check() error { return nil }

func (*Parked) check() error { return nil }

func (h *Hello) check() error {
	switch {
	case len(h.Token) > maxToken:
		return fmt.Errorf("token is %d bytes (at most %d)", len(h.Token), maxToken)
	case len(h.Python) > maxPython:
		return fmt.Errorf("python is %d bytes (at most %d)", len(h.Python), maxPython)
	case h.Parks < 0 || h.Parks > maxParks:
		return fmt.Errorf("parks must be 0 to %d, got %d", maxParks, h.Parks)
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
		return fmt.Errorf("op must be %s, %s, %s, %s, %s, %s, %s or %s, got %q", OpServers, OpTools, OpSearch, OpSkills, OpSkillSource, OpSaveSkill,
			OpResources, OpReadResource, truncate(q.Op, 40))
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

// decodeObject is readObject with encoding/json's [Decoder], which says what
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

// syntaxError words the [Decoder]'s errors for a cut payload as
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
	case want == "bool":
		return fmt.Errorf("%s: cannot unmarshal %s into a boolean", name, got)
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
