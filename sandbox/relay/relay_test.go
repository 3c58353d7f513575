package relay

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func frame(payload string) []byte {
	b := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	copy(b[4:], payload)
	return b
}

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		check   func(t *testing.T, m Message)
	}{
		{"hello", `{"type":"hello","version":1,"token":"abc","python":"3.11.2"}`, func(t *testing.T, m Message) {
			if m.Hello == nil || m.Hello.Version != 1 || m.Hello.Token != "abc" || m.Hello.Python != "3.11.2" {
				t.Fatalf("hello = %+v", m.Hello)
			}
		}},
		{"stdout", `{"type":"stdout","data":"hi\n"}`, func(t *testing.T, m Message) {
			if m.Type != TypeStdout || m.Output.Data != "hi\n" {
				t.Fatalf("got %+v", m)
			}
		}},
		{"stderr", `{"type":"stderr","data":"é"}`, func(t *testing.T, m Message) {
			if m.Type != TypeStderr || m.Output.Data != "é" {
				t.Fatalf("got %+v", m)
			}
		}},
		{"tool call", `{"type":"tool_call","id":7,"server":"fs","tool":"read","args":{"path":"/x"}}`, func(t *testing.T, m Message) {
			c := m.ToolCall
			if c.ID != 7 || c.Server != "fs" || c.Tool != "read" || string(c.Args) != `{"path":"/x"}` {
				t.Fatalf("got %+v", c)
			}
		}},
		{"tool call without args", `{"type":"tool_call","id":1,"server":"s","tool":"t"}`, func(t *testing.T, m Message) {
			if string(m.ToolCall.Args) != "{}" {
				t.Fatalf("args = %s, want {}", m.ToolCall.Args)
			}
		}},
		{"exit error", `{"type":"exit","status":"error","exit_code":1,"error":{"type":"ValueError","message":"m","traceback":"tb"},"stdout_cut":5,"stderr_cut":0}`, func(t *testing.T, m Message) {
			e := m.Exit
			if e.Status != "error" || e.ExitCode != 1 || e.Error.Type != "ValueError" || e.StdoutCut != 5 {
				t.Fatalf("got %+v", e)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewDecoder(bytes.NewReader(frame(tt.payload)), 0).Decode()
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			tt.check(t, m)
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		want  string
	}{
		{"zero length", frame(""), "frame of 0 bytes"},
		{"too large", []byte{0x7f, 0xff, 0xff, 0xff}, "allowed 1 to"},
		{"short header", []byte{0, 0}, "inside a frame header"},
		{"short payload", frame(`{"type":"stdout","data":"x"}`)[:10], "inside a frame"},
		{"not json", frame(`hello`), "not a JSON object"},
		{"array", frame(`[1]`), "not a JSON object"},
		{"no type", frame(`{"data":"x"}`), "without a type"},
		{"unknown type", frame(`{"type":"shell","cmd":"rm"}`), `unknown message type "shell"`},
		{"unknown field", frame(`{"type":"stdout","data":"x","extra":1}`), `unknown field "extra"`},
		{"wrong field type", frame(`{"type":"stdout","data":5}`), "cannot unmarshal number"},
		{"trailing data", frame(`{"type":"stdout","data":"x"} {}`), "not a JSON object"},
		{"bad exit status", frame(`{"type":"exit","status":"great","exit_code":0}`), "status must be ok or error"},
		{"ok with nonzero code", frame(`{"type":"exit","status":"ok","exit_code":3}`), "status ok with exit code 3"},
		{"negative cut", frame(`{"type":"exit","status":"ok","exit_code":0,"stdout_cut":-1}`), "must not be negative"},
		{"tool call id zero", frame(`{"type":"tool_call","id":0,"server":"s","tool":"t"}`), "positive integer"},
		{"tool call args not object", frame(`{"type":"tool_call","id":1,"server":"s","tool":"t","args":[1]}`), "args must be a JSON object"},
		{"tool call empty server", frame(`{"type":"tool_call","id":1,"server":"","tool":"t"}`), "server must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDecoder(bytes.NewReader(tt.input), 0).Decode()
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestDecodeLimitAndEOF(t *testing.T) {
	payload := `{"type":"stdout","data":"` + strings.Repeat("a", 100) + `"}`
	if _, err := NewDecoder(bytes.NewReader(frame(payload)), 64).Decode(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("frame over the decoder's limit: err = %v, want ErrProtocol", err)
	}
	if _, err := NewDecoder(bytes.NewReader(nil), 0).Decode(); err != io.EOF {
		t.Fatalf("empty stream: err = %v, want io.EOF", err)
	}
}

func TestEncoderRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.Exec(Exec{Code: "print('<&>')", OutputLimit: 1024}); err != nil {
		t.Fatal(err)
	}
	if err := enc.ToolResult(ToolResult{ID: 3, Error: &ToolError{Type: "tools_unavailable", Message: "no"}}); err != nil {
		t.Fatal(err)
	}
	if err := enc.ToolResult(ToolResult{ID: 4, Result: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	r := bytes.NewReader(buf.Bytes())
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("payload %q: %v", p, err)
		}
		got = append(got, m)
	}
	if len(got) != 3 {
		t.Fatalf("got %d frames, want 3", len(got))
	}
	if got[0]["type"] != "exec" || got[0]["code"] != "print('<&>')" || got[0]["version"] != float64(Version) || got[0]["output_limit"] != float64(1024) {
		t.Errorf("exec frame = %v", got[0])
	}
	if got[1]["type"] != "tool_result" || got[1]["error"].(map[string]any)["type"] != "tools_unavailable" || got[1]["result"] != nil {
		t.Errorf("error result frame = %v", got[1])
	}
	if got[2]["result"].(map[string]any)["a"] != float64(1) || got[2]["error"] != nil {
		t.Errorf("result frame = %v", got[2])
	}
}

func FuzzDecode(f *testing.F) {
	seeds := []string{
		`{"type":"hello","version":1,"token":"t","python":"3.11"}`,
		`{"type":"stdout","data":"x"}`,
		`{"type":"stderr","data":"\u00e9"}`,
		`{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":[1,2,{"b":null}]}}`,
		`{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":"m","traceback":"t"}}`,
		`{"type":"exit","status":"ok","exit_code":0,"stdout_cut":1}`,
		`{"type":"nope"}`,
		`{}`,
		`[]`,
	}
	for _, s := range seeds {
		f.Add(frame(s))
	}
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data), 1<<16)
		for i := 0; i < 16; i++ {
			m, err := d.Decode()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v neither io.EOF nor ErrProtocol", err)
				}
				return
			}
			// A decoded message has exactly the part its type names.
			set := 0
			for _, p := range []bool{m.Hello != nil, m.Output != nil, m.ToolCall != nil, m.Exit != nil} {
				if p {
					set++
				}
			}
			if set != 1 {
				t.Fatalf("message %q has %d parts set", m.Type, set)
			}
			if m.ToolCall != nil && (m.ToolCall.ID <= 0 || len(m.ToolCall.Args) == 0 || m.ToolCall.Args[0] != '{') {
				t.Fatalf("tool call passed checks it should fail: %+v", m.ToolCall)
			}
		}
	})
}

// BenchmarkDecodeOutput measures the hot path: a stream of 4 KiB stdout frames.
func BenchmarkDecodeOutput(b *testing.B) {
	one := frame(`{"type":"stdout","data":"` + strings.Repeat("x", 4096) + `"}`)
	stream := bytes.Repeat(one, 64)
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		d := NewDecoder(bytes.NewReader(stream), 0)
		for range 64 {
			if _, err := d.Decode(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
