package sandbox

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// packFrames encodes runner frames (JSON payloads) as the decoder reads them.
func packFrames(payloads ...string) *relay.Decoder {
	var b bytes.Buffer
	for _, p := range payloads {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		b.Write(n[:])
		b.WriteString(p)
	}
	return relay.NewDecoder(&b, 0)
}

func fileData(id int, data string) string {
	return fmt.Sprintf(`{"type":"file_data","id":%d,"data":%q}`, id, base64.StdEncoding.EncodeToString([]byte(data)))
}

func TestReadPack(t *testing.T) {
	var w bytes.Buffer
	n, err := readPack(packFrames(`{"type":"file","id":1,"name":"tmp.tar","size":5}`, fileData(1, "he"), fileData(1, "llo"),
		`{"type":"file_end","id":1,"status":"complete"}`), &w, 10)
	if err != nil || n != 5 || w.String() != "hello" {
		t.Fatalf("readPack = %d, %v, %q; want the 5 bytes", n, err, w.String())
	}
	for _, tc := range []struct {
		name   string
		frames []string
		want   string
	}{
		{"another name", []string{`{"type":"file","id":1,"name":"../x","size":1}`}, "empty, . or .. part"},
		{"another file", []string{`{"type":"file","id":1,"name":"passwd","size":1}`}, `pack answered with file "passwd"`},
		{"over the bound", []string{`{"type":"file","id":1,"name":"tmp.tar","size":11}`}, "over the 10 exec allowed"},
		{"more than announced", []string{`{"type":"file","id":1,"name":"tmp.tar","size":2}`, fileData(1, "abc")}, "sent more than its 2 bytes"},
		{"complete too soon", []string{`{"type":"file","id":1,"name":"tmp.tar","size":4}`, fileData(1, "ab"), `{"type":"file_end","id":1,"status":"complete"}`}, "complete after 2 of its 4 bytes"},
		{"a tool call meanwhile", []string{`{"type":"tool_call","id":1,"server":"s","tool":"t"}`}, "tool_call frame while packing"},
		{"output meanwhile", []string{`{"type":"stdout","data":"x"}`}, "stdout frame while packing"},
		{"a skip of another reason", []string{`{"type":"file_skip","name":"tmp.tar","size":1,"reason":"symlink"}`}, "pack answered with file_skip"},
		{"hang-up", nil, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readPack(packFrames(tc.frames...), &bytes.Buffer{}, 10)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readPack error %v, want one saying %q", err, tc.want)
			}
		})
	}
	_, err = readPack(packFrames(`{"type":"file_skip","name":"tmp.tar","size":99,"reason":"too_large"}`), &bytes.Buffer{}, 10)
	var tl *PackTooLargeError
	if !errors.As(err, &tl) || tl.Size != 99 || tl.Max != 10 {
		t.Fatalf("too large: %v", err)
	}
}
