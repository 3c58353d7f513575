package relay

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
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
		{"hello resumed", `{"type":"hello","version":7,"token":"t2","python":"3.11.2","parks":3,"resumed":true}`, func(t *testing.T, m Message) {
			if h := m.Hello; h == nil || h.Parks != 3 || !h.Resumed || h.Token != "t2" {
				t.Fatalf("hello = %+v", m.Hello)
			}
		}},
		{"hello that can park", `{"type":"hello","version":7,"token":"t","python":"3.11.2","parks":4}`, func(t *testing.T, m Message) {
			if h := m.Hello; h.Parks != 4 || h.Resumed {
				t.Fatalf("hello = %+v", m.Hello)
			}
		}},
		{"parked", `{"type":"parked"}`, func(t *testing.T, m Message) {
			if m.Type != TypeParked || m.Parked == nil {
				t.Fatalf("got %+v", m)
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
		{"query", `{"type":"query","id":3,"op":"search","args":{"query":"write file","limit":5}}`, func(t *testing.T, m Message) {
			q := m.Query
			if m.Type != TypeQuery || q.ID != 3 || q.Op != OpSearch || string(q.Args) != `{"query":"write file","limit":5}` {
				t.Fatalf("got %+v", q)
			}
		}},
		{"query read_resource", `{"type":"query","id":4,"op":"read_resource","args":{"uri":"demo://resource/1","server":null}}`, func(t *testing.T, m Message) {
			if q := m.Query; q.Op != OpReadResource || string(q.Args) != `{"uri":"demo://resource/1","server":null}` {
				t.Fatalf("got %+v", q)
			}
		}},
		{"query resources", `{"type":"query","id":5,"op":"resources","args":{"server":"fs"}}`, func(t *testing.T, m Message) {
			if q := m.Query; q.Op != OpResources {
				t.Fatalf("got %+v", q)
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
		{"query unknown op", frame(`{"type":"query","id":1,"op":"exec","args":{}}`), `op must be servers, tools, search, skills, skill_source, save_skill, resources or read_resource, got "exec"`},
		{"query without args", frame(`{"type":"query","id":1,"op":"servers"}`), `missing`},
		{"query id zero", frame(`{"type":"query","id":0,"op":"servers","args":{}}`), `id must be a positive integer`},
		{"query args not object", frame(`{"type":"query","id":1,"op":"servers","args":[]}`), `args`},
		{"parked with a field", frame(`{"type":"parked","now":true}`), `unknown field "now"`},
		{"resumed not a boolean", frame(`{"type":"hello","version":7,"token":"t","python":"3","resumed":1}`), "resumed: cannot unmarshal number into a boolean"},
		{"resumed null", frame(`{"type":"hello","version":7,"token":"t","python":"3","resumed":null}`), "resumed: cannot unmarshal null into a boolean"},
		{"parks negative", frame(`{"type":"hello","version":7,"token":"t","python":"3","parks":-1}`), "parks must be 0 to 64, got -1"},
		{"parks too many", frame(`{"type":"hello","version":7,"token":"t","python":"3","parks":65}`), "parks must be 0 to 64, got 65"},
		{"park is the bridge's", frame(`{"type":"park"}`), `unknown message type "park"`},
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

// strictRejects are payloads the strict decoder refuses (review findings 1
// and 2), with a piece of the error each must give.
var strictRejects = []struct {
	name    string
	payload string
	want    string
}{
	// Keys are matched exactly: a case variant is an unknown field.
	{"exit keys in other case", `{"type":"exit","STATUS":"ok","Exit_Code":0}`, `unknown field "STATUS"`},
	{"exit key capitalized", `{"type":"exit","status":"ok","Exit_code":0}`, `unknown field "Exit_code"`},
	{"stdout data in capitals", `{"type":"stdout","DATA":"x"}`, `unknown field "DATA"`},
	{"type key capitalized", `{"Type":"stdout","data":"x"}`, "without a type"},
	{"hello token capitalized", `{"type":"hello","version":1,"Token":"t","python":"3"}`, `unknown field "Token"`},
	// Files out.
	{"file name with ..", `{"type":"file","id":1,"name":"a/../../etc/passwd","size":1}`, "empty, . or .. part"},
	{"file name absolute", `{"type":"file","id":1,"name":"/etc/passwd","size":1}`, "empty, . or .. part"},
	{"file name with NUL", `{"type":"file","id":1,"name":"a\u0000b","size":1}`, "NUL"},
	{"file name empty", `{"type":"file","id":1,"name":"","size":1}`, "name must be 1 to 1024 bytes"},
	{"file name too long", `{"type":"file","id":1,"name":"` + strings.Repeat("a/", 600) + `","size":1}`, "name must be 1 to 1024 bytes"},
	{"file name part too long", `{"type":"file","id":1,"name":"` + strings.Repeat("a", 256) + `","size":1}`, "part over 255 bytes"},
	{"file id 0", `{"type":"file","id":0,"name":"a","size":1}`, "id must be a positive integer"},
	{"file size negative", `{"type":"file","id":1,"name":"a","size":-1}`, "size must not be negative"},
	{"file without size", `{"type":"file","id":1,"name":"a"}`, `missing field "size"`},
	{"file_data not base64", `{"type":"file_data","id":1,"data":"not base64!"}`, "illegal base64"},
	{"file_data empty", `{"type":"file_data","id":1,"data":""}`, "data must be 1 to"},
	{"file_data over a piece", `{"type":"file_data","id":1,"data":"` + strings.Repeat("AAAA", MaxFilePiece/3+1) + `"}`, "data must be 1 to"},
	{"file_end unknown status", `{"type":"file_end","id":1,"status":"done"}`, "status must be complete, changed or unreadable"},
	{"file_skip unknown reason", `{"type":"file_skip","name":"a","size":0,"reason":"boring"}`, "reason must be one of"},
	{"file_skip bad name too long", `{"type":"file_skip","name":"` + strings.Repeat("x", 257) + `","size":0,"reason":"bad_name"}`, "cut to 256 bytes"},
	{"file_skip symlink name with ..", `{"type":"file_skip","name":"../x","size":0,"reason":"symlink"}`, "empty, . or .. part"},
	{"exit files_skipped negative", `{"type":"exit","status":"ok","exit_code":0,"files_skipped":-1}`, "must not be negative"},
	{"tool call args capitalized", `{"type":"tool_call","id":1,"server":"s","tool":"t","Args":{}}`, `unknown field "Args"`},
	{"error object key in capitals", `{"type":"exit","status":"error","exit_code":1,"error":{"TYPE":"E","message":"m"}}`, `error: unknown field "TYPE"`},
	{"field of another type", `{"type":"stdout","data":"x","status":"ok"}`, `unknown field "status"`},
	{"unknown error object key", `{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":"m","lineno":3}}`, `error: unknown field "lineno"`},
	{"unknown key in non-ASCII", `{"type":"stdout","data":"x","dàta":1}`, `unknown field "dàta"`},

	// Each key at most once, also when spelled with escapes.
	{"duplicate data", `{"type":"stdout","data":"a","data":"b"}`, `duplicate field "data"`},
	{"duplicate type", `{"type":"stdout","data":"a","type":"stderr"}`, `duplicate field "type"`},
	{"duplicate exit_code", `{"type":"exit","status":"error","exit_code":1,"exit_code":0}`, `duplicate field "exit_code"`},
	{"duplicate escaped key", `{"type":"stdout","data":"a","d\u0061ta":"b"}`, `duplicate field "data"`},
	{"duplicate token", `{"type":"hello","version":1,"token":"a","token":"b","python":"3"}`, `duplicate field "token"`},
	{"duplicate args", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{},"args":{"a":1}}`, `duplicate field "args"`},
	{"duplicate error object key", `{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":"m","message":"n"}}`, `error: duplicate field "message"`},

	// Required keys.
	{"stdout without data", `{"type":"stdout"}`, `missing field "data"`},
	{"stderr without data", `{"type":"stderr"}`, `missing field "data"`},
	{"hello without token", `{"type":"hello","version":1,"python":"3"}`, `missing field "token"`},
	{"hello without version", `{"type":"hello","token":"t","python":"3"}`, `missing field "version"`},
	{"hello without python", `{"type":"hello","version":1,"token":"t"}`, `missing field "python"`},
	{"tool call without id", `{"type":"tool_call","server":"s","tool":"t"}`, `missing field "id"`},
	{"tool call without server", `{"type":"tool_call","id":1,"tool":"t"}`, `missing field "server"`},
	{"tool call without tool", `{"type":"tool_call","id":1,"server":"s"}`, `missing field "tool"`},
	{"exit without status", `{"type":"exit","exit_code":0}`, `missing field "status"`},
	{"exit without exit_code", `{"type":"exit","status":"ok"}`, `missing field "exit_code"`},
	{"error object without message", `{"type":"exit","status":"error","exit_code":1,"error":{"type":"E"}}`, `error: missing field "message"`},
	{"error object without type", `{"type":"exit","status":"error","exit_code":1,"error":{"message":"m"}}`, `error: missing field "type"`},

	// Values of the wrong JSON type, null included.
	{"data null", `{"type":"stdout","data":null}`, "data: cannot unmarshal null into a string"},
	{"data array", `{"type":"stdout","data":["x"]}`, "data: cannot unmarshal array into a string"},
	{"type not a string", `{"type":1,"data":"x"}`, "type: cannot unmarshal number into a string"},
	{"version a string", `{"type":"hello","version":"1","token":"t","python":"3"}`, "version: cannot unmarshal string into an integer"},
	{"version a fraction", `{"type":"hello","version":1.5,"token":"t","python":"3"}`, "version: 1.5 is not an integer"},
	{"exit_code with exponent", `{"type":"exit","status":"error","exit_code":1e0}`, "exit_code: 1e0 is not an integer"},
	{"exit_code as 1.0", `{"type":"exit","status":"error","exit_code":1.0}`, "exit_code: 1.0 is not an integer"},
	{"exit_code a bool", `{"type":"exit","status":"error","exit_code":true}`, "exit_code: cannot unmarshal bool into an integer"},
	{"id beyond int64", `{"type":"tool_call","id":9223372036854775808,"server":"s","tool":"t"}`, "id: 9223372036854775808 is out of range"},
	{"args null", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":null}`, "args must be a JSON object, got null"},
	{"args a string", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":"{}"}`, "args must be a JSON object, got string"},
	{"error null", `{"type":"exit","status":"error","exit_code":1,"error":null}`, "error: cannot unmarshal null into an object"},
	{"error a string", `{"type":"exit","status":"error","exit_code":1,"error":"boom"}`, "error: cannot unmarshal string into an object"},
	{"error.message not a string", `{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":{}}}`, "error.message: cannot unmarshal object into a string"},
	{"error.traceback null", `{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":"m","traceback":null}}`, "error.traceback: cannot unmarshal null into a string"},
	{"stdout_cut a string", `{"type":"exit","status":"ok","exit_code":0,"stdout_cut":"0"}`, "stdout_cut: cannot unmarshal string into an integer"},

	// Bounds.
	{"exit_code -5", `{"type":"exit","status":"error","exit_code":-5}`, "exit_code must be 0 to 255, got -5"},
	{"exit_code -1", `{"type":"exit","status":"error","exit_code":-1}`, "exit_code must be 0 to 255, got -1"},
	{"exit_code 256", `{"type":"exit","status":"error","exit_code":256}`, "exit_code must be 0 to 255, got 256"},
	{"exit_code huge", `{"type":"exit","status":"error","exit_code":9223372036854775807}`, "exit_code must be 0 to 255"},
	{"ok with exit_code 256", `{"type":"exit","status":"ok","exit_code":256}`, "exit_code must be 0 to 255, got 256"},
	{"negative stderr_cut", `{"type":"exit","status":"ok","exit_code":0,"stderr_cut":-1}`, "must not be negative"},
	{"token of 257 bytes", `{"type":"hello","version":1,"token":"` + strings.Repeat("t", 257) + `","python":"3"}`, "token is 257 bytes (at most 256)"},
	{"python of 65 bytes", `{"type":"hello","version":1,"token":"t","python":"` + strings.Repeat("3", 65) + `"}`, "python is 65 bytes (at most 64)"},
	{"python of 65 bytes after unescaping", `{"type":"hello","version":1,"token":"t","python":"` + strings.Repeat(`\u00e9`, 33) + `"}`, "python is 66 bytes (at most 64)"},
	{"server of 257 bytes", `{"type":"tool_call","id":1,"server":"` + strings.Repeat("s", 257) + `","tool":"t"}`, "server must be 1 to 256 bytes"},
	{"tool of 257 bytes", `{"type":"tool_call","id":1,"server":"s","tool":"` + strings.Repeat("t", 257) + `"}`, "tool must be 1 to 256 bytes"},
	{"empty tool", `{"type":"tool_call","id":1,"server":"s","tool":""}`, "tool must be 1 to 256 bytes"},
	{"negative id", `{"type":"tool_call","id":-3,"server":"s","tool":"t"}`, "id must be a positive integer, got -3"},

	// JSON syntax, as encoding/json checks it.
	{"empty type", `{"type":"","data":"x"}`, "without a type"},
	{"single quotes", `{'type':'stdout'}`, "not a JSON object"},
	{"trailing comma", `{"type":"stdout","data":"x",}`, "not a JSON object"},
	{"missing colon", `{"type" "stdout"}`, "not a JSON object"},
	{"unterminated string", `{"type":"stdout","data":"x}`, "not a JSON object: unexpected end"},
	{"control character in a string", "{\"type\":\"stdout\",\"data\":\"a\tb\"}", `invalid character '\t' in string literal`},
	{"bad escape", `{"type":"stdout","data":"\x41"}`, `invalid character 'x' in string escape code`},
	{"short unicode escape", `{"type":"stdout","data":"\u12"}`, `invalid character '"' in \u hexadecimal character escape`},
	{"leading zero", `{"type":"tool_call","id":01,"server":"s","tool":"t"}`, "not a JSON object"},
	{"plus sign", `{"type":"tool_call","id":+1,"server":"s","tool":"t"}`, "not a JSON object"},
	{"bare decimal point", `{"type":"exit","status":"ok","exit_code":0.}`, "not a JSON object"},
	{"NaN", `{"type":"exit","status":"ok","exit_code":NaN}`, "not a JSON object"},
	{"literal cut short", `{"type":"stdout","data":"x","z":tru`, "not a JSON object: unexpected end"},
	{"misspelt literal", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":nul}}`, "not a JSON object"},
	{"bad value in args", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":[1,]}}`, "not a JSON object"},
	{"unclosed args", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":[1}}`, "not a JSON object"},
	{"args key not a string", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{1:2}}`, "not a JSON object"},
	{"second object", `{"type":"stdout","data":"x"}{"type":"stdout","data":"y"}`, "trailing data"},
	{"byte order mark", "\ufeff{\"type\":\"stdout\",\"data\":\"x\"}", "not a JSON object"},
	{"only whitespace", " \n", "not a JSON object: unexpected end"},
	{"args nested too deep", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}}`, "exceeded max depth"},
}

func TestDecodeRejectsStrict(t *testing.T) {
	for _, tt := range strictRejects {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDecoder(bytes.NewReader(frame(tt.payload)), 0).Decode()
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// strictAccepts are payloads at the edges of what the decoder allows.
var strictAccepts = []struct {
	name    string
	payload string
	check   func(t *testing.T, m Message)
}{
	{"keys in any order, with whitespace", " \t\r\n{ \"data\" : \"x\" ,\n\"type\":\"stdout\" } \n", func(t *testing.T, m Message) {
		if m.Type != TypeStdout || m.Output.Data != "x" {
			t.Fatalf("got %s", dump(m))
		}
	}},
	{"escaped key", `{"typ\u0065":"stderr","\u0064ata":"x"}`, func(t *testing.T, m Message) {
		if m.Type != TypeStderr || m.Output.Data != "x" {
			t.Fatalf("got %s", dump(m))
		}
	}},
	{"escapes", `{"type":"stdout","data":"\"\\\/\b\f\n\r\t\u0041\u00e9\u4e16\ud83d\ude00"}`, func(t *testing.T, m Message) {
		if want := "\"\\/\b\f\n\r\tAé世😀"; m.Output.Data != want {
			t.Fatalf("data = %q, want %q", m.Output.Data, want)
		}
	}},
	{"lone surrogates become U+FFFD", `{"type":"stdout","data":"a\ud800b\udc00\ud800\ud800\ude00"}`, func(t *testing.T, m Message) {
		if want := "a\uFFFDb\uFFFD\uFFFD\U00010200"; m.Output.Data != want {
			t.Fatalf("data = %q, want %q", m.Output.Data, want)
		}
	}},
	{"invalid UTF-8 becomes U+FFFD", "{\"type\":\"stdout\",\"data\":\"a\xffb\xed\xa0\x80c\xe4\xb8\"}", func(t *testing.T, m Message) {
		if want := "a\uFFFDb\uFFFD\uFFFD\uFFFDc\uFFFD\uFFFD"; m.Output.Data != want {
			t.Fatalf("data = %q, want %q", m.Output.Data, want)
		}
	}},
	{"non-ASCII and DEL kept as sent", "{\"type\":\"stdout\",\"data\":\"héllo wörld \u4e16\u754c \x7f \U0001F600\"}", func(t *testing.T, m Message) {
		if want := "héllo wörld 世界 \x7f 😀"; m.Output.Data != want {
			t.Fatalf("data = %q, want %q", m.Output.Data, want)
		}
	}},
	{"empty data", `{"type":"stdout","data":""}`, func(t *testing.T, m Message) {
		if m.Output.Data != "" {
			t.Fatalf("data = %q", m.Output.Data)
		}
	}},
	{"hello at its bounds", `{"type":"hello","version":1,"token":"` + strings.Repeat("t", 256) + `","python":"` + strings.Repeat("3", 64) + `"}`, func(t *testing.T, m Message) {
		if len(m.Hello.Token) != 256 || len(m.Hello.Python) != 64 {
			t.Fatalf("got %+v", m.Hello)
		}
	}},
	{"hello of another version", `{"type":"hello","version":2,"token":"t","python":"3.13.0"}`, func(t *testing.T, m Message) {
		if m.Hello.Version != 2 { // the handshake, not the decoder, refuses it
			t.Fatalf("got %+v", m.Hello)
		}
	}},
	{"exit_code 255", `{"type":"exit","status":"error","exit_code":255,"stdout_cut":0,"stderr_cut":0}`, func(t *testing.T, m Message) {
		if m.Exit.ExitCode != 255 || m.Exit.Error != nil {
			t.Fatalf("got %+v", m.Exit)
		}
	}},
	{"file as the runner sends it", `{"type":"file","id":3,"name":"plots/sine é.png","size":1048576}`, func(t *testing.T, m Message) {
		if f := m.File; f.ID != 3 || f.Name != "plots/sine é.png" || f.Size != 1<<20 {
			t.Fatalf("got %+v", f)
		}
	}},
	{"file_data of a full piece", `{"type":"file_data","id":1,"data":"` + strings.Repeat("AAAA", MaxFilePiece/3) + "AA==" + `"}`, func(t *testing.T, m Message) {
		if d := m.FileData; d.ID != 1 || len(d.Data) != MaxFilePiece {
			t.Fatalf("got id %d, %d bytes", d.ID, len(d.Data))
		}
	}},
	{"file_skip of a bad name", `{"type":"file_skip","name":"caf\\xe9/../x","size":7,"reason":"bad_name"}`, func(t *testing.T, m Message) {
		if k := m.FileSkip; k.Name != `caf\xe9/../x` || k.Size != 7 || k.Reason != "bad_name" {
			t.Fatalf("got %+v", k)
		}
	}},
	{"exit with files skipped", `{"type":"exit","status":"ok","exit_code":0,"files_skipped":9900}`, func(t *testing.T, m Message) {
		if m.Exit.FilesSkipped != 9900 {
			t.Fatalf("got %+v", m.Exit)
		}
	}},
	{"exit_code -0", `{"type":"exit","status":"ok","exit_code":-0}`, func(t *testing.T, m Message) {
		if m.Exit.ExitCode != 0 {
			t.Fatalf("got %+v", m.Exit)
		}
	}},
	{"exit as the runner sends it", `{"type":"exit","status":"error","exit_code":1,"stdout_cut":0,"stderr_cut":12,"error":{"type":"ZeroDivisionError","message":"division by zero","traceback":"Traceback (most recent call last):\n  File \"<code>\", line 1, in <module>\nZeroDivisionError: division by zero\n"}}`, func(t *testing.T, m Message) {
		e := m.Exit
		if e.StderrCut != 12 || e.Error.Type != "ZeroDivisionError" || e.Error.Message != "division by zero" || !strings.HasSuffix(e.Error.Traceback, "division by zero\n") {
			t.Fatalf("got %+v %+v", e, e.Error)
		}
	}},
	{"error without traceback", `{"type":"exit","status":"error","exit_code":1,"error":{"message":"m","type":"SyntaxError"}}`, func(t *testing.T, m Message) {
		if m.Exit.Error.Type != "SyntaxError" || m.Exit.Error.Traceback != "" {
			t.Fatalf("got %+v", m.Exit.Error)
		}
	}},
	{"tool call args kept as sent", `{"type":"tool_call","id":9223372036854775807,"server":"fs","tool":"read","args": { "p" : [1, -2.5e-3, true, false, null, {"":{}}, "\u00e9"] } }`, func(t *testing.T, m Message) {
		c := m.ToolCall
		if c.ID != 1<<63-1 || string(c.Args) != `{ "p" : [1, -2.5e-3, true, false, null, {"":{}}, "\u00e9"] }` {
			t.Fatalf("got %+v, args %s", c, c.Args)
		}
	}},
	{"args with duplicate keys left to the tool", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":1,"a":2}}`, func(t *testing.T, m Message) {
		if string(m.ToolCall.Args) != `{"a":1,"a":2}` {
			t.Fatalf("args = %s", m.ToolCall.Args)
		}
	}},
	{"args nested to the limit", `{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":` + strings.Repeat("[", maxDepth-2) + strings.Repeat("]", maxDepth-2) + `}}`, func(t *testing.T, m Message) {
		if len(m.ToolCall.Args) != 6+2*(maxDepth-2) {
			t.Fatalf("args of %d bytes", len(m.ToolCall.Args))
		}
	}},
}

func TestDecodeAcceptsStrict(t *testing.T) {
	for _, tt := range strictAccepts {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewDecoder(bytes.NewReader(frame(tt.payload)), 0).Decode()
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			tt.check(t, m)
			checkInvariants(t, m)
		})
	}
}

func TestErrorFieldsBounded(t *testing.T) {
	big := strings.Repeat("ab\n", 10<<20/3) // a 10 MiB traceback
	payload, err := json.Marshal(map[string]any{
		"type": "exit", "status": "error", "exit_code": 1,
		"error": map[string]string{"type": strings.Repeat("T", 1000), "message": big[:70000], "traceback": big},
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewDecoder(bytes.NewReader(frame(string(payload))), 0).Decode()
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	checkInvariants(t, m)
	e := m.Exit.Error
	if e.Type != strings.Repeat("T", 253)+"..." {
		t.Errorf("type of %d bytes = %.20q...", len(e.Type), e.Type)
	}
	for _, f := range []struct {
		name, got, sent string
	}{{"message", e.Message, big[:70000]}, {"traceback", e.Traceback, big}} {
		marker := fmt.Sprintf("\n[... %d bytes cut ...]\n", len(f.sent)-maxErrorText)
		if want := f.sent[:maxErrorText/2] + marker + f.sent[len(f.sent)-maxErrorText/2:]; f.got != want {
			t.Errorf("%s: got %d bytes %.40q...%.40q, want %d bytes", f.name, len(f.got), f.got, f.got[len(f.got)-40:], len(want))
		}
	}
}

func TestClip(t *testing.T) {
	// Texts up to the limit and its slack pass unchanged.
	for _, n := range []int{0, 1, maxErrorText, maxErrorText + errorTextSlack} {
		if s := strings.Repeat("a", n); clip([]byte(s)) != s {
			t.Errorf("clip changed a text of %d bytes", n)
		}
	}
	// What the runner sends after its own cut (images/runner/runner.py,
	// clip) is not cut again, whatever the count in its marker.
	runner := strings.Repeat("h", maxErrorText/2) + "\n[... 16777216 bytes cut ...]\n" + strings.Repeat("t", maxErrorText/2)
	if clip([]byte(runner)) != runner {
		t.Errorf("clip cut what the runner had cut")
	}
	// Longer texts keep their head and tail at character boundaries; check
	// every alignment of 1- to 4-byte characters around both cut points.
	for _, ch := range []string{"a", "é", "世", "😀"} {
		for pad := 0; pad < 4; pad++ {
			for _, size := range []int{maxErrorText + errorTextSlack + 1, maxErrorText + 1000, 3 * maxErrorText} {
				s := strings.Repeat("x", pad) + strings.Repeat(ch, (size-pad)/len(ch))
				s += strings.Repeat("y", size-len(s))
				got := clip([]byte(s))
				head, rest, ok := strings.Cut(got, "\n[... ")
				if !ok {
					t.Fatalf("%q×%d: no marker in %.40q", ch, size, got)
				}
				num, tail, ok := strings.Cut(rest, " bytes cut ...]\n")
				cut, err := strconv.Atoi(num)
				switch {
				case !ok || err != nil:
					t.Fatalf("%q×%d: bad marker in %q", ch, size, rest[:40])
				case !utf8.ValidString(got):
					t.Fatalf("%q pad %d size %d: clip split a character", ch, pad, size)
				case !strings.HasPrefix(s, head) || !strings.HasSuffix(s, tail):
					t.Fatalf("%q pad %d size %d: head or tail not kept", ch, pad, size)
				case len(head) > maxErrorText/2 || len(tail) > maxErrorText/2 || len(head) < maxErrorText/2-3 || len(tail) < maxErrorText/2-3:
					t.Fatalf("%q pad %d size %d: head %d and tail %d bytes", ch, pad, size, len(head), len(tail))
				case len(head)+cut+len(tail) != len(s):
					t.Fatalf("%q pad %d size %d: marker says %d cut, %d were", ch, pad, size, cut, len(s)-len(head)-len(tail))
				case len(got) > maxErrorText+errorTextSlack:
					t.Fatalf("%q pad %d size %d: clipped to %d bytes", ch, pad, size, len(got))
				}
			}
		}
	}
}

func TestCutTail(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{strings.Repeat("a", 256), strings.Repeat("a", 256)},
		{strings.Repeat("a", 257), strings.Repeat("a", 253) + "..."},
		{strings.Repeat("a", 252) + "世界", strings.Repeat("a", 252) + "..."},
		{strings.Repeat("a", 250) + "世界", strings.Repeat("a", 250) + "世界"},
		{strings.Repeat("a", 250) + "世界b", strings.Repeat("a", 250) + "世..."},
	} {
		if got := cutTail([]byte(tt.in), 256); got != tt.want || len(got) > 256 {
			t.Errorf("cutTail(%d bytes) = %q, want %q", len(tt.in), got, tt.want)
		}
	}
}

// The decoder reuses its buffer; what it returned before must not change.
func TestDecodedMessagesOwnTheirMemory(t *testing.T) {
	first := `{"type":"tool_call","id":1,"server":"aa","tool":"bb","args":{"k":"vv"}}`
	second := `{"type":"tool_call","id":2,"server":"cc","tool":"dd","args":{"k":"ww"}}`
	d := NewDecoder(bytes.NewReader(append(frame(first), frame(second)...)), 0)
	m1, err := d.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode(); err != nil {
		t.Fatal(err)
	}
	if c := m1.ToolCall; c.Server != "aa" || c.Tool != "bb" || string(c.Args) != `{"k":"vv"}` {
		t.Fatalf("first message changed: %+v %s", c, c.Args)
	}
}

func TestDecodeRefusesKeyFlood(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"stdout","data":"x"`)
	for i := range 100000 {
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString("}")
	_, err := ParsePayload([]byte(b.String()))
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "more than 32 fields") {
		t.Fatalf("err = %v", err)
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
	if err := enc.Exec(Exec{Code: "x", Session: true}); err != nil {
		t.Fatal(err)
	}
	if err := enc.Interrupt(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Park(); err != nil {
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
	if len(got) != 6 {
		t.Fatalf("got %d frames, want 6", len(got))
	}
	if len(got[5]) != 1 || got[5]["type"] != "park" {
		t.Errorf("park frame = %v", got[5])
	}
	if got[0]["type"] != "exec" || got[0]["code"] != "print('<&>')" || got[0]["version"] != float64(Version) || got[0]["output_limit"] != float64(1024) {
		t.Errorf("exec frame = %v", got[0])
	}
	if _, ok := got[0]["session"]; ok {
		t.Errorf("exec frame without a session has a session field: %v", got[0])
	}
	if got[3]["type"] != "exec" || got[3]["session"] != true {
		t.Errorf("session exec frame = %v", got[3])
	}
	if len(got[4]) != 1 || got[4]["type"] != "interrupt" {
		t.Errorf("interrupt frame = %v", got[4])
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
		`{"type":"hello","version":7,"token":"t","python":"3.11","parks":2,"resumed":true}`,
		`{"type":"hello","version":7,"token":"t","python":"3.11","resumed":false}`,
		`{"type":"parked"}`,
		`{"type":"stderr","data":"\u00e9"}`,
		`{"type":"tool_call","id":1,"server":"s","tool":"t","args":{"a":[1,2,{"b":null}]}}`,
		`{"type":"query","id":2,"op":"tools","args":{"server":"s"}}`,
		`{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":"m","traceback":"t"}}`,
		`{"type":"exit","status":"ok","exit_code":0,"stdout_cut":1}`,
		`{"type":"exit","status":"error","exit_code":255,"stdout_cut":0,"stderr_cut":9}`,
		`{"type":"nope"}`,
		`{}`,
		`[]`,
		// What the strict key checks are about.
		`{"type":"exit","STATUS":"ok","Exit_Code":0}`,
		`{"type":"stdout"}`,
		`{"type":"stdout","data":"a","data":"b"}`,
		`{"type":"stdout","d\u0061ta":"a"}`,
		`{"data":"x","type":"stdout"}`,
		` { "type" : "stderr" , "data" : "\ud83d\ude00\ud800\"\\\/\b\f\n\r\t" } `,
		`{"type":"exit","status":"error","exit_code":-5}`,
		`{"type":"exit","status":"error","exit_code":1.0}`,
		`{"type":"tool_call","id":9223372036854775807,"server":"s","tool":"t","args":{"k":"v","n":[-1.5e3,true,false,null,{}]}}`,
		`{"type":"exit","status":"error","exit_code":1,"error":{"type":"E","message":"m","type":"F"}}`,
		`{"type":"exit","status":"ok","exit_code":0,"files_skipped":3}`,
		`{"type":"file","id":1,"name":"plots/sine.png","size":5}`,
		`{"type":"file","id":2,"name":"../etc/passwd","size":5}`,
		`{"type":"file_data","id":1,"data":"aGVsbG8="}`,
		`{"type":"file_data","id":1,"data":"not base64!"}`,
		`{"type":"file_end","id":1,"status":"complete"}`,
		`{"type":"file_end","id":1,"status":"changed"}`,
		`{"type":"file_skip","name":"link","size":0,"reason":"symlink"}`,
		`{"type":"file_skip","name":"a\\xff","size":0,"reason":"bad_name"}`,
	}
	for _, s := range seeds {
		f.Add(frame(s))
		f.Add([]byte(s)) // mutates better as a bare payload: see below
	}
	f.Add(frame(`{"type":"stdout","data":"x"}` + "\xff\xfe"))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte(`{"type":"file_data","id":7,"data":"aGVsbG8="}`))
	f.Add([]byte(`{"type":"file_data","id":07,"data":"aGVsbG8="}`))
	f.Add([]byte(`{"type":"file_data","id":1,"data":"aGVs\nbG8="}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fast path for file_data agrees with the generic one.
		if m, ok, err := parseFileData(data); ok {
			g, gerr := parsePayload(data)
			if (err == nil) != (gerr == nil) || (err == nil && (g.FileData == nil || g.FileData.ID != m.FileData.ID || !bytes.Equal(g.FileData.Data, m.FileData.Data))) {
				t.Fatalf("%q: fast path %+v %v, generic %+v %v", data, m.FileData, err, g.FileData, gerr)
			}
		}
		// The whole input as one payload.
		if len(data) > 0 {
			m, err := ParsePayload(data)
			if err != nil && !errors.Is(err, ErrProtocol) {
				t.Fatalf("payload %q: error %v does not wrap ErrProtocol", data, err)
			}
			if err == nil {
				checkInvariants(t, m)
			}
		}

		// The input as a stream of frames.
		const limit = 1 << 16
		d := NewDecoder(bytes.NewReader(data), limit)
		rest := data
		for i := 0; i < 16; i++ {
			m, err := d.Decode()
			var payload []byte // this frame's payload, if it is whole
			if len(rest) >= 4 {
				if n := int(binary.BigEndian.Uint32(rest)); n >= 1 && n <= limit && n <= len(rest)-4 {
					payload, rest = rest[4:4+n], rest[4+n:]
				}
			}
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v neither io.EOF nor ErrProtocol", err)
				}
				return
			}
			if payload == nil {
				t.Fatalf("decoded %+v from a broken frame", m)
			}
			checkInvariants(t, m)
		}
	})
}

func dump(m Message) string {
	return fmt.Sprintf("%+v hello=%+v output=%+v tool_call=%+v query=%+v exit=%+v", m, m.Hello, m.Output, m.ToolCall, m.Query, m.Exit)
}

// checkInvariants checks what every accepted message guarantees, whatever
// the runner sent.
func checkInvariants(t *testing.T, m Message) {
	t.Helper()
	set := 0
	for _, p := range []bool{m.Hello != nil, m.Output != nil, m.ToolCall != nil, m.Query != nil, m.Exit != nil,
		m.File != nil, m.FileData != nil, m.FileEnd != nil, m.FileSkip != nil, m.Parked != nil} {
		if p {
			set++
		}
	}
	if set != 1 {
		t.Fatalf("message %q has %d parts set", m.Type, set)
	}
	valid := func(field, s string) {
		if !utf8.ValidString(s) {
			t.Fatalf("%s %s is not valid UTF-8: %q", m.Type, field, s)
		}
	}
	switch m.Type {
	case TypeHello:
		h := m.Hello
		if h == nil || len(h.Token) > maxToken || len(h.Python) > maxPython || h.Parks < 0 || h.Parks > maxParks {
			t.Fatalf("hello passed checks it should fail: %+v", h)
		}
		valid("token", h.Token)
		valid("python", h.Python)
	case TypeParked:
	case TypeStdout, TypeStderr:
		if m.Output == nil {
			t.Fatalf("%s without output", m.Type)
		}
		valid("data", m.Output.Data)
	case TypeToolCall:
		c := m.ToolCall
		if c == nil || c.ID <= 0 || len(c.Args) == 0 || c.Args[0] != '{' || !json.Valid(c.Args) ||
			c.Server == "" || len(c.Server) > maxName || c.Tool == "" || len(c.Tool) > maxName {
			t.Fatalf("tool call passed checks it should fail: %+v", c)
		}
		valid("server", c.Server)
		valid("tool", c.Tool)
	case TypeQuery:
		q := m.Query
		if q == nil || q.ID <= 0 || len(q.Args) == 0 || q.Args[0] != '{' || !json.Valid(q.Args) ||
			!IsQueryOp(q.Op) {
			t.Fatalf("query passed checks it should fail: %+v", q)
		}
	case TypeFile:
		f := m.File
		if f == nil || f.ID <= 0 || f.Size < 0 || CheckFileName(f.Name) != nil {
			t.Fatalf("file passed checks it should fail: %+v", f)
		}
	case TypeFileData:
		d := m.FileData
		if d == nil || d.ID <= 0 || len(d.Data) == 0 || len(d.Data) > MaxFilePiece {
			t.Fatalf("file_data passed checks it should fail: %+v", d)
		}
	case TypeFileEnd:
		e := m.FileEnd
		if e == nil || e.ID <= 0 || (e.Status != FileComplete && e.Status != FileChanged && e.Status != FileUnreadable) {
			t.Fatalf("file_end passed checks it should fail: %+v", e)
		}
	case TypeFileSkip:
		k := m.FileSkip
		if k == nil || k.Size < 0 || !slices.Contains(SkipReasons, k.Reason) || len(k.Name) > MaxFileName ||
			(k.Reason != "bad_name" && CheckFileName(k.Name) != nil) {
			t.Fatalf("file_skip passed checks it should fail: %+v", k)
		}
		valid("name", k.Name)
	case TypeExit:
		e := m.Exit
		if e == nil || e.ExitCode < 0 || e.ExitCode > 255 || (e.Status != "ok" && e.Status != "error") ||
			(e.Status == "ok" && e.ExitCode != 0) || e.StdoutCut < 0 || e.StderrCut < 0 {
			t.Fatalf("exit passed checks it should fail: %+v", e)
		}
		if x := e.Error; x != nil {
			if len(x.Type) > maxErrorType || len(x.Message) > maxErrorText+errorTextSlack || len(x.Traceback) > maxErrorText+errorTextSlack {
				t.Fatalf("exit error over its bounds: type %d, message %d, traceback %d bytes", len(x.Type), len(x.Message), len(x.Traceback))
			}
			valid("error.type", x.Type)
			valid("error.message", x.Message)
			valid("error.traceback", x.Traceback)
		}
	default:
		t.Fatalf("decoded a message of type %q", m.Type)
	}
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

// ToolResultFrame copies a result in as it is; the frame decodes to the
// same message the encoder would have written.
func TestToolResultFrame(t *testing.T) {
	for _, m := range []ToolResult{
		{ID: 7, Result: json.RawMessage(`{"content":[{"type":"text","text":"a\u2028<b>"}]}`)},
		{ID: -1, Result: json.RawMessage(`[1, 2]`)},
		{ID: 9, Error: &ToolError{Type: ErrLimit, Message: "too big"}},
	} {
		f, err := ToolResultFrame(m)
		if err != nil {
			t.Fatal(err)
		}
		fast := bytes.Join(f, nil)
		if len(fast) != f.Len() {
			t.Fatalf("Len %d of a %d-byte frame", f.Len(), len(fast))
		}
		var buf bytes.Buffer
		if err := NewEncoder(&buf).ToolResult(m); err != nil {
			t.Fatal(err)
		}
		var a, b map[string]any
		if err := json.Unmarshal(fast[4:], &a); err != nil {
			t.Fatalf("%s: %v", fast[4:], err)
		}
		if err := json.Unmarshal(buf.Bytes()[4:], &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) || int(binary.BigEndian.Uint32(fast)) != len(fast)-4 {
			t.Fatalf("frame %s, want %s", fast, buf.Bytes())
		}
	}
	if _, err := ToolResultFrame(ToolResult{ID: 1, Result: json.RawMessage(`{"a":`)}); err == nil {
		t.Fatal("an invalid result was framed")
	}
	big := json.RawMessage(`"` + strings.Repeat("x", MaxFrameSize) + `"`)
	if _, err := ToolResultFrame(ToolResult{ID: 1, Result: big}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a result over the frame limit: %v", err)
	}
}

// FuzzReadObject: on valid JSON, the in-place scanner finds what
// encoding/json's Decoder finds: the same keys, values, unknown and
// duplicate keys, and the same refusals.
func FuzzReadObject(f *testing.F) {
	for _, s := range []string{
		`{"type":"stdout","data":"x"}`, ` { "a" : [1, {"b": "}]\"\\"}], "c": -1.5e3 , "d": true, "e": null } `,
		`{"a":1,"a":2,"zz":3}`, `[]`, `"s"`, `{}`, `{"":{}}`, `{"k":"\u00e9\ud83d\ude00"}`,
	} {
		f.Add([]byte(s))
	}
	kinds := map[string]string{"type": "string", "data": "string", "a": "number", "b": "string", "c": "number", "d": "boolean", "e": "null", "k": "string", "": "object"}
	f.Fuzz(func(t *testing.T, p []byte) {
		if !json.Valid(p) {
			return
		}
		a, errA := scanObject(p, kinds)
		b, errB := decodeObject(p, kinds)
		if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
			t.Fatalf("%q: scan %v, decode %v", p, errA, errB)
		}
		if errA != nil {
			return
		}
		if !reflect.DeepEqual(a.keys, b.keys) || !reflect.DeepEqual(a.unknown, b.unknown) || !reflect.DeepEqual(a.dup, b.dup) || len(a.values) != len(b.values) {
			t.Fatalf("%q: scan %+v, decode %+v", p, a, b)
		}
		for k, v := range a.values {
			if !bytes.Equal(v, b.values[k]) {
				t.Fatalf("%q: value of %q: scan %q, decode %q", p, k, v, b.values[k])
			}
		}
	})
}

// Decoding one 16 MiB output frame allocates about twice its size (the
// frame's buffer and the string it holds), not once per copy the parsing
// makes; and the buffer is not kept for the next frame.
func TestDecodeBigFrameCost(t *testing.T) {
	data := strings.Repeat("x", MaxFrameSize-64)
	payload, _ := json.Marshal(map[string]string{"type": "stdout", "data": data})
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	frame = append(frame, payload...)
	d := NewDecoder(bytes.NewReader(frame), 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := d.Decode()
	runtime.ReadMemStats(&after)
	if err != nil || len(m.Output.Data) != len(data) {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(2.5*float64(len(payload))) {
		t.Fatalf("decoding a %d-byte frame allocated %d bytes (%.1fx)", len(payload), got, float64(got)/float64(len(payload)))
	}
	if d.buf != nil {
		t.Fatalf("the decoder kept a %d-byte buffer", cap(d.buf))
	}
}

// BenchmarkParseFileData measures a 1 MiB file_data frame as the runner
// writes it (the fast path) and with its keys in another order (the
// generic path).
func BenchmarkParseFileData(b *testing.B) {
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), MaxFilePiece))
	for _, tc := range []struct{ name, payload string }{
		{"runner", `{"type":"file_data","id":1,"data":"` + data + `"}`},
		{"generic", `{"type":"file_data","data":"` + data + `","id":1}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := []byte(tc.payload)
			b.SetBytes(MaxFilePiece)
			for b.Loop() {
				if m, err := ParsePayload(p); err != nil || len(m.FileData.Data) != MaxFilePiece {
					b.Fatal(err)
				}
			}
		})
	}
}
