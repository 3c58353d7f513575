package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// askPolicy writes a policy that asks before misbehave's echo, denies its
// fail, and gives the human 3 s; extra lines go to the tools section.
func askPolicy(t *testing.T, e *engine, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + `tools:
  rules:
    - {server: misbehave, tool: echo, action: ask, reason: "echoing needs a human"}
    - {server: misbehave, tool: fail, action: deny, reason: "no failing"}
  ask_timeout: 3s
` + extra
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// recordingServers writes a servers config with the misbehave test
// upstream recording its calls in the returned file.
func recordingServers(t *testing.T, args ...string) (config, record string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config, record = filepath.Join(dir, "servers.json"), filepath.Join(dir, "record.jsonl")
	writeServers(t, config, map[string]any{
		"misbehave": map[string]any{"command": self, "args": append([]string{"--name", "misbehave", "--record", record}, args...),
			"env": map[string]string{upstreamEnv: "1"}},
	})
	return config, record
}

// recordedArgs are the arguments misbehave's tool received, in order.
func recordedArgs(t *testing.T, path, tool string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Tool      string
			Arguments json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Tool == tool {
			out = append(out, string(r.Arguments))
		}
	}
	return out
}

// human answers elicitations as told, one answer per question, and keeps
// the questions.
type human struct {
	mu        sync.Mutex
	answers   []func() (*mcp.ElicitResult, error)
	questions []*mcp.ElicitParams
}

func (h *human) tell(answers ...func() (*mcp.ElicitResult, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers, h.questions = answers, nil
}

func (h *human) asked() []*mcp.ElicitParams {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*mcp.ElicitParams(nil), h.questions...)
}

func (h *human) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	h.mu.Lock()
	h.questions = append(h.questions, req.Params)
	var answer func() (*mcp.ElicitResult, error)
	if len(h.answers) > 0 {
		answer, h.answers = h.answers[0], h.answers[1:]
	}
	h.mu.Unlock()
	if answer == nil {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	return answer()
}

func accept(remember bool) func() (*mcp.ElicitResult, error) {
	return func() (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"remember": remember}}, nil
	}
}

func decline() (*mcp.ElicitResult, error) { return &mcp.ElicitResult{Action: "decline"}, nil }

// dismiss closes the dialog without an answer.
func dismiss() (*mcp.ElicitResult, error) { return &mcp.ElicitResult{Action: "cancel"}, nil }

// silent answers only after the policy's 3 s are gone.
func silent() (*mcp.ElicitResult, error) {
	time.Sleep(4500 * time.Millisecond)
	return &mcp.ElicitResult{Action: "accept"}, nil
}

// traceOutput is run_python's structuredContent with its tool-call trace.
type traceOutput struct {
	callOutput
	ToolCalls []struct {
		Server, Tool, Decision, Answer, Error string
		ArgumentBytes                         int `json:"argument_bytes"`
		ResultBytes                           int `json:"result_bytes"`
	} `json:"tool_calls"`
	ToolCallsCut   int            `json:"tool_calls_cut"`
	ToolCallsCutBy map[string]int `json:"tool_calls_cut_by"`
}

func traceCall(t *testing.T, cs *mcp.ClientSession, code string) (traceOutput, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	var out traceOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return out, contentText(res)
}

// connectAsking starts `bridge serve` over stdio and connects a go-sdk
// client with h as its human, speaking protocol version (the newest when
// "").
func connectAsking(t *testing.T, e *engine, h *human, version string, extra ...string) *mcp.ClientSession {
	t.Helper()
	args, env := serveArgs(e)
	args = append(withoutSandboxFlags(args), extra...)
	cmd := exec.Command(testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	var opts *mcp.ClientOptions
	if h != nil {
		opts = &mcp.ClientOptions{ElicitationHandler: h.handle}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "asking", Version: "1"}, opts).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("bridge serve stderr:\n%s", stderr)
		}
	})
	return cs
}

// The code of the ask tests: work printed first, then the asked call.
const (
	askOnce = `import mcp_tools
print("work done")
try:
    print(mcp_tools.call("misbehave", "echo", message="MSG")["message"])
except mcp_tools.ToolDeniedError as e:
    print("denied:", e)
print("after")
`
	askThreads = `import mcp_tools, threading
got = []
def f(i):
    got.append(mcp_tools.call("misbehave", "echo", message=f"t{i}")["message"])
ts = [threading.Thread(target=f, args=(i,)) for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print(len(got))
`
	// nag40 calls a tool that needs an answer 40 times, catching the
	// denials.
	nag40 = `import mcp_tools
denied = []
for i in range(40):
    try:
        mcp_tools.call("misbehave", "echo", message="nag")
    except mcp_tools.ToolDeniedError as e:
        denied.append(str(e))
print(len(denied), denied[0].endswith("the user dismissed the request"),
      denied[-1].endswith("not asked, the user dismissed an earlier question of this run"))
`
	askThrice = `import mcp_tools
for i in range(3):
    print(mcp_tools.call("misbehave", "echo", message=f"r{i}")["message"])
`
)

// TestAsk: a policy rule that says ask asks the human through the client
// that made the call, whichever way its protocol version takes (in the
// call, or through the call's result), while the code waits; accept lets
// the call through, decline, dismissal and silence deny it and the code
// goes on; remembering asks once a run; a client that cannot be asked
// gets the fallback; the trace lists the calls with their decisions.
func TestAsk(t *testing.T) {
	forEngines(t, aboveEngine("asking the human (a tools rule's ask)"), func(t *testing.T, e *engine) {
		for _, c := range []struct{ name, version string }{{"result", ""}, {"in-call", "2025-11-25"}} {
			t.Run(c.name, func(t *testing.T) {
				servers, record := recordingServers(t)
				h := &human{}
				debugAddr := freeLoopbackAddr(t)
				cs := connectAsking(t, e, h, c.version, "--policy", askPolicy(t, e, ""), "--servers-config", servers, "--debug-addr", debugAddr)
				once := func(msg string) (traceOutput, string) {
					return traceCall(t, cs, strings.Replace(askOnce, "MSG", msg, 1))
				}

				// Accept: the upstream gets the call, the code goes on.
				h.tell(accept(false))
				out, text := once("yes")
				base := settledStats(t, debugAddr)
				if out.Status != "ok" || out.Stdout != "work done\nyes\nafter\n" {
					t.Fatalf("accepted: %+v %q", out, text)
				}
				if got := recordedArgs(t, record, "echo"); len(got) != 1 || !strings.Contains(got[0], `"yes"`) {
					t.Fatalf("the upstream got %q", got)
				}
				q := h.asked()
				if len(q) != 1 || !strings.Contains(q[0].Message, `"echo"`) || !strings.Contains(q[0].Message, `"misbehave"`) ||
					!strings.Contains(q[0].Message, "echoing needs a human") || !strings.Contains(q[0].Message, `"message": "yes"`) {
					t.Fatalf("the questions: %+v", q)
				}
				if len(out.ToolCalls) != 1 || out.ToolCalls[0].Decision != "asked" || out.ToolCalls[0].Answer != "accepted" || out.ToolCalls[0].Error != "" {
					t.Errorf("trace: %+v", out.ToolCalls)
				}

				// Decline, and silence: denied, never reaching the upstream;
				// the code's work is kept.
				for _, d := range []struct {
					answer func() (*mcp.ElicitResult, error)
					msg    string
					says   string
				}{{decline, "no", "the user declined it"}, {silent, "late", "no answer within 3s"}} {
					h.tell(d.answer)
					out, text = once(d.msg)
					if out.Status != "ok" || !strings.HasPrefix(out.Stdout, "work done\ndenied: ") || !strings.Contains(out.Stdout, d.says) ||
						!strings.HasSuffix(out.Stdout, "after\n") {
						t.Fatalf("%s: %+v %q", d.msg, out, text)
					}
					if !strings.Contains(text, "[1 tool call: 1 asked]") {
						t.Errorf("%s: the text lacks the trace line: %q", d.msg, text)
					}
				}
				if got := recordedArgs(t, record, "echo"); len(got) != 1 {
					t.Fatalf("a denied call reached the upstream: %q", got)
				}

				// A "no" holds for the rest of the run: no second prompt.
				h.tell(decline, accept(false))
				out, text = traceCall(t, cs, `import mcp_tools
for i in range(2):
    try:
        mcp_tools.call("misbehave", "echo", message="nag")
    except mcp_tools.ToolDeniedError as e:
        print(e)
`)
				if lines := strings.Split(strings.TrimSpace(out.Stdout), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[0], "the user declined it") ||
					!strings.HasSuffix(lines[1], "the user declined it earlier in this run") || len(h.asked()) != 1 {
					t.Fatalf("declined twice: %+v %q, %d questions", out, text, len(h.asked()))
				}

				// A dismissed question ends the asking for the rest of the
				// run: code calling 40 times puts one question, every later
				// call is denied at once, saying why, and the next run may
				// ask again.
				h.tell(dismiss)
				out, text = traceCall(t, cs, nag40)
				if out.Status != "ok" || out.Stdout != "40 True True\n" || len(h.asked()) != 1 {
					t.Fatalf("dismissed, then 39 calls more: %+v %q, %d questions", out, text, len(h.asked()))
				}
				if len(out.ToolCalls) != 40 || out.ToolCalls[0].Answer != "cancelled" || out.ToolCalls[39].Answer != "withheld" {
					t.Errorf("trace: first %+v, last %+v", out.ToolCalls[0], out.ToolCalls[len(out.ToolCalls)-1])
				}

				// Remember for the run: three calls, one question; the next
				// run asks again.
				h.tell(accept(true), accept(false))
				out, text = traceCall(t, cs, askThrice)
				if out.Status != "ok" || out.Stdout != "r0\nr1\nr2\n" || len(h.asked()) != 1 {
					t.Fatalf("remembered: %+v %q, %d questions", out, text, len(h.asked()))
				}
				if len(out.ToolCalls) != 3 || out.ToolCalls[0].Answer != "accepted" || out.ToolCalls[1].Answer != "remembered" || out.ToolCalls[2].Answer != "remembered" {
					t.Errorf("trace: %+v", out.ToolCalls)
				}
				h.tell(accept(false))
				if out, text = once("again"); out.Stdout != "work done\nagain\nafter\n" || len(h.asked()) != 1 {
					t.Fatalf("the next run: %+v %q, %d questions", out, text, len(h.asked()))
				}

				// The trace: three calls, one denied, in order.
				h.tell(accept(false))
				out, _ = traceCall(t, cs, `import mcp_tools
mcp_tools.call("misbehave", "count")
try:
    mcp_tools.call("misbehave", "fail", message="x")
except mcp_tools.ToolDeniedError:
    pass
mcp_tools.call("misbehave", "echo", message="z")
`)
				var got []string
				for _, c := range out.ToolCalls {
					got = append(got, c.Tool+":"+c.Decision+":"+c.Answer+":"+c.Error)
				}
				if strings.Join(got, " ") != "count:allowed:: fail:denied::denied echo:asked:accepted:" || out.ToolCalls[2].ResultBytes == 0 ||
					out.ToolCalls[1].ArgumentBytes == 0 {
					t.Errorf("trace: %q %+v", got, out.ToolCalls)
				}

				// Code asking from 16 threads at once: one question at a time,
				// and the answer remembered lets the others through.
				h.tell(accept(true))
				out, text = traceCall(t, cs, askThreads)
				if out.Status != "ok" || out.Stdout != "16\n" || len(h.asked()) != 1 {
					t.Fatalf("threads: %+v %q, %d questions", out, text, len(h.asked()))
				}

				// What the asks cost the bridge is given back.
				var now bridgeStats
				waitFor(t, 30*time.Second, "the bridge's goroutines back to where they were", func() bool {
					now = settledStats(t, debugAddr)
					return now.backTo(base, 2, 1<<20)
				})
				t.Logf("after the asks: %d goroutines (%d before), RSS %d MiB (%d before)", now.Goroutines, base.Goroutines, now.RSS>>20, base.RSS>>20)
			})
		}

		// A client without elicitation: tools.ask_fallback.
		t.Run("fallback", func(t *testing.T) {
			servers, record := recordingServers(t)
			cs := connectAsking(t, e, nil, "", "--policy", askPolicy(t, e, ""), "--servers-config", servers)
			out, text := traceCall(t, cs, strings.Replace(askOnce, "MSG", "x", 1))
			if !strings.Contains(out.Stdout, "denied: misbehave/echo needs the user's approval (echoing needs a human), and this client cannot ask the user") {
				t.Fatalf("deny fallback: %+v %q", out, text)
			}
			cs = connectAsking(t, e, nil, "", "--policy", askPolicy(t, e, "  ask_fallback: allow\n"), "--servers-config", servers)
			if out, text = traceCall(t, cs, strings.Replace(askOnce, "MSG", "fell", 1)); out.Stdout != "work done\nfell\nafter\n" ||
				len(out.ToolCalls) != 1 || out.ToolCalls[0].Answer != "fallback" {
				t.Fatalf("allow fallback: %+v %q", out, text)
			}
			if got := recordedArgs(t, record, "echo"); len(got) != 1 {
				t.Fatalf("the upstream got %q", got)
			}
		})
	})
}

// TestAskTypeScriptClient: the same through the TypeScript SDK's client
// with an elicitation handler (integration/npm/elicit-client.mjs): accept,
// decline, no answer, and "remember for this run" asking once for three
// calls.
func TestAskTypeScriptClient(t *testing.T) {
	scope := aboveEngine("asking the human through a TypeScript client")
	runsOn(t, scope)
	npm := npmPeers(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		servers, record := recordingServers(t)
		args, env := serveArgs(e)
		args = append(withoutSandboxFlags(args), "--policy", askPolicy(t, e, ""), "--servers-config", servers)
		spec, _ := json.Marshal(map[string]any{"calls": []map[string]any{
			{"code": strings.Replace(askOnce, "MSG", "ts-yes", 1), "answers": []string{"accept"}},
			{"code": strings.Replace(askOnce, "MSG", "ts-no", 1), "answers": []string{"decline"}},
			{"code": strings.Replace(askOnce, "MSG", "ts-late", 1), "answers": []string{"silent:4500"}},
			{"code": askThrice, "answers": []string{"accept-remember"}},
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(filepath.Dir(npm), "elicit-client.mjs"), "--", testSuite.bridgeBin}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(string(spec))
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		stdout, err := cmd.Output()
		if err != nil {
			t.Fatalf("elicit-client.mjs: %v\n%s", err, stderr)
		}
		var got []struct {
			Structured traceOutput
			Text       string
			Questions  []string
		}
		for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
			var r struct {
				Structured traceOutput
				Text       string
				Questions  []string
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			got = append(got, r)
		}
		if len(got) != 4 {
			t.Fatalf("%d results:\n%s\n%s", len(got), stdout, stderr)
		}
		check := func(i int, stdout string, questions int, says string) {
			t.Helper()
			r := got[i]
			if !strings.HasPrefix(r.Structured.Stdout, stdout) || len(r.Questions) != questions || !strings.Contains(r.Structured.Stdout, says) {
				t.Errorf("call %d: %+v", i, r)
			}
		}
		check(0, "work done\nts-yes\nafter\n", 1, "")
		check(1, "work done\ndenied: ", 1, "the user declined it")
		check(2, "work done\ndenied: ", 1, "no answer within 3s")
		check(3, "r0\nr1\nr2\n", 1, "")
		if q := got[0].Questions; len(q) == 1 && !strings.Contains(q[0], "echoing needs a human") {
			t.Errorf("the question: %q", q[0])
		}
		if a := recordedArgs(t, record, "echo"); len(a) != 4 || !strings.Contains(a[0], "ts-yes") {
			t.Errorf("the upstream got %q", a)
		}
	})
}
