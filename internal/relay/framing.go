package relay

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Decoder reads frames from the runner.
type Decoder struct {
	r   io.Reader
	max int
	hdr [4]byte
	buf []byte
}

// NewDecoder returns a [Decoder] that refuses frames larger than maxFrame
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

// Encoder writes frames to the runner. It is not safe for concurrent use;
// callers serialize writes.
type Encoder struct {
	w   io.Writer
	buf []byte // reused between frames
}

// NewEncoder returns an [Encoder] writing to w.
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

// Put announces an input file (docs/protocol.md, "Files in").
func (e *Encoder) Put(m Put) error {
	return e.write(struct {
		Type string `json:"type"`
		Put
	}{TypePut, m})
}

// PutData sends the next piece of the input file being put.
func (e *Encoder) PutData(m PutData) error {
	return e.write(struct {
		Type string `json:"type"`
		PutData
	}{TypePutData, m})
}

// PutEnd ends the input file being put.
func (e *Encoder) PutEnd(m PutEnd) error {
	return e.write(struct {
		Type string `json:"type"`
		PutEnd
	}{TypePutEnd, m})
}

// Pack asks a session's runner for its /tmp as one tar file.
func (e *Encoder) Pack(m Pack) error {
	return e.write(struct {
		Type string `json:"type"`
		Pack
	}{TypePack, m})
}

// Park asks a session's runner, between two calls, to answer parked, close
// the relay and wait for SIGUSR1 (docs/protocol.md, "Parking").
func (e *Encoder) Park() error {
	return e.write(struct {
		Type string `json:"type"`
	}{TypePark})
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
