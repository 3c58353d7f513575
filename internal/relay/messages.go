package relay

import "encoding/json"

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
	// The bridge's frames that put a run's input files in the sandbox
	// before its exec (docs/protocol.md, "Files in").
	TypePut     = "put"
	TypePutData = "put_data"
	TypePutEnd  = "put_end"
	// TypePack asks a session's runner, between two calls, for its /tmp as
	// one tar file (docs/protocol.md, "Snapshots").
	TypePack = "pack"
	// TypePark asks a session's runner, between two calls, to let go of the
	// relay and wait to be woken in a restored sandbox; the runner answers
	// TypeParked (docs/protocol.md, "Parking").
	TypePark   = "park"
	TypeParked = "parked"
)

// Hello is the runner's first message, and its first again after a park.
type Hello struct {
	Version int    `json:"version"`
	Token   string `json:"token"`
	Python  string `json:"python"`
	// Parks is how many more times the runner can park: it made that many
	// spare sockets before confining itself, and each park uses one. 0
	// (absent) for a runner started without a token file, which cannot.
	Parks int `json:"parks,omitempty"`
	// Resumed says the runner connects again after a park, in a restored
	// sandbox, its session's interpreter kept.
	Resumed bool `json:"resumed,omitempty"`
}

// Parked answers a park: the runner closes the relay after it. It has no
// fields.
type Parked struct{}

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
// there are, a server's tools, a search across them and the skills), has
// it save a skill, or lists or reads the servers' resources: one of the Op
// constants.
type Query struct {
	ID   int64           `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

// The operations a [Query] may ask for.
const (
	OpServers = "servers"
	OpTools   = "tools"
	OpSearch  = "search"
	// OpSkills lists the saved skills, OpSkillSource reads one, and
	// OpSaveSkill saves one (docs/protocol.md, "Skills").
	OpSkills      = "skills"
	OpSkillSource = "skill_source"
	OpSaveSkill   = "save_skill"
	// OpResources lists the upstream servers' resources and OpReadResource
	// reads one (docs/protocol.md, "Resources").
	OpResources    = "resources"
	OpReadResource = "read_resource"
)

// IsQueryOp reports whether op is an operation a [Query] may ask for.
func IsQueryOp(op string) bool {
	switch op {
	case OpServers, OpTools, OpSearch, OpSkills, OpSkillSource, OpSaveSkill, OpResources, OpReadResource:
		return true
	}
	return false
}

// ErrorInfo describes an exception raised by the code. As decoded, Type is
// at most 256 bytes, and [Message] and Traceback keep at most 64 KiB of their
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

// Put announces one input file; its bytes follow in PutData frames (at
// most MaxFilePiece each) and a PutEnd. Path is relative to the inputs
// folder, checked as [File]'s Name is.
type Put struct {
	ID   int64  `json:"id"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Archive says the file is a tar of a session's /tmp to unpack there
	// (a restored snapshot), not a file for the inputs folder; only the
	// first put before an exec may be one.
	Archive bool `json:"archive,omitempty"`
}

// Pack asks for the session's /tmp as one tar file of at most MaxBytes:
// the runner answers with file, file_data and file_end frames, or a
// file_skip too_large that says its size.
type Pack struct {
	MaxBytes int64 `json:"max_bytes"`
}

// PackName is the name of the file a pack is answered with.
const PackName = "tmp.tar"

// PutData is the next piece of the input file being put.
type PutData struct {
	ID   int64  `json:"id"`
	Data []byte `json:"data"`
}

// PutEnd ends the input file being put.
type PutEnd struct {
	ID int64 `json:"id"`
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
	// Script runs the code as `python3 FILE` would (bridge run): the value
	// of its last expression is not shown, and figures left open do not
	// come back (docs/protocol.md).
	Script bool `json:"script,omitempty"`
	// Inputs is how many input files were put before this exec; the
	// runner checks it, and fails the run without running the code if one
	// could not be written.
	Inputs int `json:"inputs,omitempty"`
}

// ToolError is the error half of a [ToolResult].
type ToolError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// The error types of a [ToolResult].
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
	// ErrUnknownResource: no server has the resource read, or several do
	// and the code named none.
	ErrUnknownResource = "unknown_resource"
)

// ToolResult answers a [ToolCall] or a [Query]. Exactly one of Result and Error is set.
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
	Parked   *Parked
}
