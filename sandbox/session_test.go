package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A session with the real runner (a host process): one interpreter across
// Execs, interrupts that keep it, and code that does not stop losing it.
func TestSessionExecs(t *testing.T) {
	rt := newFake(pythonRunner(t))
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	ex.interruptGrace = time.Second
	inst, err := ex.Start(context.Background(), testLimits(), "sess")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	n := 0
	exec := func(code string, timeout time.Duration, session bool, sink Sink) Result {
		t.Helper()
		n++
		res, err := inst.Exec(context.Background(), ExecRequest{RunID: "r" + strings.Repeat("x", n), Code: code,
			Timeout: timeout, OutputBytes: 1 << 16, Session: session, Sink: sink,
			Files: FileLimits{MaxFiles: 10, MaxFileBytes: 1 << 20, MaxBytes: 1 << 20}})
		if err != nil {
			t.Fatalf("exec %d: %v", n, err)
		}
		return res
	}

	if r := exec("x = 41\nimport os\nopen(os.environ['BRIDGE_OUTPUTS'] + '/a.txt', 'w').write('a')", 10*time.Second, true, nil); r.Status != StatusOK {
		t.Fatalf("first: %+v", r)
	}
	if !inst.Kept() {
		t.Fatal("the session was not kept after an ok call")
	}
	sink := &recordSink{}
	r := exec("open(os.environ['BRIDGE_OUTPUTS'] + '/b.txt', 'w').write('b')\ndef f():\n    raise ValueError('from f')\nprint(x + 1)", 10*time.Second, true, sink)
	if r.Status != StatusOK || r.Stdout != "42\n" {
		t.Fatalf("second: %+v", r)
	}
	if len(sink.files) != 1 || sink.files[0].info.Name != "b.txt" {
		t.Errorf("second call sent files %v, want only the new b.txt", sink.files)
	}
	// An error in a function from an earlier call shows that call's lines.
	r = exec("f()", 10*time.Second, true, nil)
	if r.Status != StatusError || r.Error == nil || !strings.Contains(r.Error.Traceback, `File "<code 2>", line 3, in f`) {
		t.Fatalf("third: %+v %+v", r, r.Error)
	}

	// A timeout interrupts the code; it stops, and the state is kept.
	r = exec("import time\nx += 1\ntime.sleep(60)", 300*time.Millisecond, true, nil)
	if r.Status != StatusTimeout || !strings.Contains(r.Message, "keeps its state") || !inst.Kept() {
		t.Fatalf("interrupted: %+v, kept %v", r, inst.Kept())
	}
	if r := exec("print(x)", 10*time.Second, true, nil); r.Stdout != "42\n" {
		t.Fatalf("after the interrupt: %+v", r)
	}

	// A call outside the session is refused on a session's instance.
	if _, err := inst.Exec(context.Background(), ExecRequest{RunID: "other", Code: "print(x)", Timeout: time.Second}); err == nil {
		t.Fatal("a non-session Exec ran in a session's instance")
	}

	// Code that ignores the interrupt loses the session.
	r = exec("while True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass", 300*time.Millisecond, true, nil)
	if r.Status != StatusTimeout || !strings.Contains(r.Message, "state is lost") || inst.Kept() {
		t.Fatalf("ignored the interrupt: %+v, kept %v", r, inst.Kept())
	}
	if _, err := inst.Exec(context.Background(), ExecRequest{RunID: "after", Code: "print(x)", Timeout: time.Second, Session: true}); err == nil {
		t.Fatal("an Exec ran after the session was lost")
	}
}

// Without a session, an instance still runs code once.
func TestExecOnceWithoutSession(t *testing.T) {
	rt := newFake(pythonRunner(t))
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	inst, err := ex.Start(context.Background(), testLimits(), "once")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	if r, err := inst.Exec(context.Background(), ExecRequest{RunID: "a", Code: "x = 1", Timeout: 10 * time.Second}); err != nil || r.Status != StatusOK {
		t.Fatalf("%+v %v", r, err)
	}
	if inst.Kept() {
		t.Fatal("an instance without a session was kept")
	}
	if _, err := inst.Exec(context.Background(), ExecRequest{RunID: "b", Code: "print(x)", Timeout: 10 * time.Second, Session: true}); err == nil {
		t.Fatal("a second Exec ran")
	}
}
