// Package relay implements the bridge's side of the relay protocol: the
// framing and the messages exchanged with the runner over the per-run unix
// socket. Everything read here comes from the sandbox and is treated as
// hostile: sizes are bounded, types and fields are checked strictly.
// The protocol is documented in docs/protocol.md: framing.go reads and
// writes frames, messages.go holds the messages as Go values, and
// validate.go checks each payload strictly before it becomes one.
package relay

import (
	"errors"
)

// Version is the relay protocol version this package speaks.
const Version = 7

// MaxFrameSize is the largest payload a frame may carry, in bytes.
const MaxFrameSize = 16 << 20

// MaxResultBytes is the default bound on one tool result sent to the
// runner, as JSON: half a frame, leaving room for the frame's own fields.
const MaxResultBytes = 8 << 20

// ErrProtocol is wrapped by every error caused by a malformed frame.
var ErrProtocol = errors.New("relay protocol error")
