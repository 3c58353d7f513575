package proxy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// encodeResult says what json.Marshal says, for every kind of content.
func TestEncodeResultMatchesMarshal(t *testing.T) {
	results := []*mcp.CallToolResult{
		{},
		{Content: []mcp.Content{}},
		{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("a\"<>&\u2028é\n", 1000)}}},
		{Content: []mcp.Content{&mcp.TextContent{Text: ""}}, IsError: true},
		{
			Meta: mcp.Meta{"content": "not the content", "k": []any{1.0, "x"}},
			Content: []mcp.Content{
				&mcp.TextContent{Text: "t", Meta: mcp.Meta{"a": "b"}, Annotations: &mcp.Annotations{Priority: 0.5}},
				&mcp.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte("wav"), MIMEType: "audio/wav"},
				&mcp.ResourceLink{URI: "file:///x", Name: "x"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///y", Text: "y"}},
			},
			StructuredContent: map[string]any{"n": 1.0, "s": "v"},
		},
	}
	for i, r := range results {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		var w, g any
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%d: invalid JSON %s: %v", i, got, err)
		}
		if !reflect.DeepEqual(w, g) {
			t.Errorf("%d:\n got %s\nwant %s", i, got, want)
		}
	}
}
