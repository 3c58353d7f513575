package proxy

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// encodeResult is json.Marshal(res) in one pass over the content. The SDK's
// types marshal themselves (MarshalJSON), and encoding/json compacts what
// every MarshalJSON returns, at each level of nesting: a 4 MiB text result
// was scanned four times over. Here each content item's MarshalJSON runs
// once and its bytes are copied into place; the rest of the result (small,
// but for structuredContent) is marshalled as usual. The JSON has the same
// keys and values as json.Marshal(res), with the keys sorted.
func encodeResult(res *mcp.CallToolResult) ([]byte, error) {
	rest := *res
	rest.Content = nil
	head, err := json.Marshal(&rest)
	if err != nil || res.Content == nil {
		return head, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(head, &fields); err != nil {
		return nil, err
	}
	items := make([][]byte, len(res.Content))
	size := len(head) + 2
	for i, c := range res.Content {
		// Each content type marshals itself; calling MarshalJSON directly
		// skips encoding/json's compaction of its output.
		b, err := c.MarshalJSON()
		if err != nil {
			return nil, err
		}
		items[i] = b
		size += len(b) + 1
	}
	keys := make([]string, 0, len(fields)+1)
	for k := range fields {
		keys = append(keys, k)
	}
	if _, ok := fields["content"]; !ok {
		keys = append(keys, "content")
	}
	slices.Sort(keys)
	buf := bytes.NewBuffer(make([]byte, 0, size+64))
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		if k != "content" {
			buf.Write(fields[k])
			continue
		}
		buf.WriteByte('[')
		for j, b := range items {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.Write(b)
		}
		buf.WriteByte(']')
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
