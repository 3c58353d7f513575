package relay_test

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// A frame is a 4-byte big-endian length and a JSON message. The bridge
// decodes the runner's frames strictly, and frames its answers.
func ExampleDecoder() {
	payload := []byte(`{"type":"tool_call","id":1,"server":"github","tool":"list_issues","args":{"repo":"a/b"}}`)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	frame = append(frame, payload...)
	// A field the protocol does not know is refused, not ignored.
	bad := []byte(`{"type":"tool_call","id":2,"server":"s","tool":"t","args":{},"sudo":true}`)
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(bad)))
	frame = append(frame, bad...)

	dec := relay.NewDecoder(bytes.NewReader(frame), 0)
	m, err := dec.Decode()
	fmt.Println(m.Type, m.ToolCall.ID, m.ToolCall.Server, m.ToolCall.Tool, string(m.ToolCall.Args), err)
	_, err = dec.Decode()
	fmt.Println(err)

	answer, _ := relay.ToolResultFrame(relay.ToolResult{ID: 1, Result: []byte(`{"content":[]}`)})
	var b bytes.Buffer
	for _, part := range answer {
		b.Write(part)
	}
	fmt.Printf("%d bytes: %s\n", binary.BigEndian.Uint32(b.Bytes()), b.Bytes()[4:])
	// Output:
	// tool_call 1 github list_issues {"repo":"a/b"} <nil>
	// relay protocol error: tool_call: unknown field "sudo"
	// 53 bytes: {"type":"tool_result","id":1,"result":{"content":[]}}
}
