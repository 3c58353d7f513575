// Package relay implements the bridge's side of the relay protocol: the
// framing and the messages exchanged with the runner over the per-run unix
// socket. Everything read here comes from the sandbox and is treated as
// hostile: sizes are bounded, types and fields are checked strictly.
// The protocol is documented in docs/protocol.md.
package relay

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the relay protocol version this package speaks.
const Version = 1

// MaxFrameSize is the largest payload a frame may carry, in bytes.
const MaxFrameSize = 16 << 20

// Message types.
const (
	TypeHello      = "hello"
	TypeStdout     = "stdout"
	TypeStderr     = "stderr"
	TypeToolCall   = "tool_call"
	TypeExit       = "exit"
	TypeExec       = "exec"
	TypeToolResult = "tool_result"
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

// ErrorInfo describes an exception raised by the code.
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
}

// Exec hands the code to the runner.
type Exec struct {
	Version     int    `json:"version"`
	Code        string `json:"code"`
	OutputLimit int    `json:"output_limit"`
}

// ToolError is the error half of a ToolResult.
type ToolError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// ToolResult answers a ToolCall. Exactly one of Result and Error is set.
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
	Exit     *Exit
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
	if _, err := io.ReadFull(d.r, payload); err != nil {
		return Message{}, fmt.Errorf("%w: connection closed inside a frame: %v", ErrProtocol, err)
	}
	return ParsePayload(payload)
}

// ParsePayload decodes one frame's payload.
func ParsePayload(payload []byte) (Message, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(payload, &head); err != nil {
		return Message{}, fmt.Errorf("%w: payload is not a JSON object: %v", ErrProtocol, err)
	}
	m := Message{Type: head.Type}
	var err error
	switch head.Type {
	case TypeHello:
		var w struct {
			Type string `json:"type"`
			Hello
		}
		err = strict(payload, &w)
		m.Hello = &w.Hello
	case TypeStdout, TypeStderr:
		var w struct {
			Type string `json:"type"`
			Output
		}
		err = strict(payload, &w)
		m.Output = &w.Output
	case TypeToolCall:
		var w struct {
			Type string `json:"type"`
			ToolCall
		}
		if err = strict(payload, &w); err == nil {
			err = w.ToolCall.check()
		}
		m.ToolCall = &w.ToolCall
	case TypeExit:
		var w struct {
			Type string `json:"type"`
			Exit
		}
		if err = strict(payload, &w); err == nil {
			err = w.Exit.check()
		}
		m.Exit = &w.Exit
	case "":
		return Message{}, fmt.Errorf("%w: frame without a type", ErrProtocol)
	default:
		return Message{}, fmt.Errorf("%w: unknown message type %q", ErrProtocol, truncate(head.Type, 40))
	}
	if err != nil {
		return Message{}, fmt.Errorf("%w: %s: %v", ErrProtocol, head.Type, err)
	}
	return m, nil
}

// strict decodes payload into v, refusing unknown fields and trailing data.
func strict(payload []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func (c *ToolCall) check() error {
	switch {
	case c.ID <= 0:
		return fmt.Errorf("id must be a positive integer, got %d", c.ID)
	case c.Server == "" || len(c.Server) > 256:
		return errors.New("server must be 1 to 256 bytes")
	case c.Tool == "" || len(c.Tool) > 256:
		return errors.New("tool must be 1 to 256 bytes")
	}
	if len(c.Args) == 0 || string(c.Args) == "null" {
		c.Args = json.RawMessage("{}")
	} else if c.Args[0] != '{' {
		return errors.New("args must be a JSON object")
	}
	return nil
}

func (e *Exit) check() error {
	switch {
	case e.Status != "ok" && e.Status != "error":
		return fmt.Errorf("status must be ok or error, got %q", truncate(e.Status, 40))
	case e.StdoutCut < 0 || e.StderrCut < 0:
		return errors.New("cut counts must not be negative")
	case e.Status == "ok" && e.ExitCode != 0:
		return fmt.Errorf("status ok with exit code %d", e.ExitCode)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Encoder writes frames to the runner. It is not safe for concurrent use;
// callers serialize writes.
type Encoder struct {
	w   io.Writer
	buf bytes.Buffer
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

// ToolResult sends a tool_result message.
func (e *Encoder) ToolResult(m ToolResult) error {
	return e.write(struct {
		Type string `json:"type"`
		ToolResult
	}{TypeToolResult, m})
}

func (e *Encoder) write(v any) error {
	e.buf.Reset()
	e.buf.Write([]byte{0, 0, 0, 0})
	enc := json.NewEncoder(&e.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := e.buf.Bytes()
	n := len(b) - 4 - 1 // without the header and Encode's trailing newline
	b = b[:len(b)-1]
	if n > MaxFrameSize {
		return fmt.Errorf("message of %d bytes exceeds the relay's %d-byte frame limit", n, MaxFrameSize)
	}
	binary.BigEndian.PutUint32(b[:4], uint32(n))
	_, err := e.w.Write(b)
	return err
}
