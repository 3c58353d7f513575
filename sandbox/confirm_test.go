package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
)

// confirmingRuntime is a fakeRuntime that says whether a runner came from
// the container it started, as the Kubernetes engine does.
type confirmingRuntime struct {
	*fakeRuntime
	err   error
	asked atomic.Int64
}

func (c *confirmingRuntime) Confirm(context.Context, string) error {
	c.asked.Add(1)
	return c.err
}

// A runner whose container the engine does not confirm (on Kubernetes: a
// pod that took a deleted run pod's name, and with it the run folder and
// the relay token in the spec) gets no code, and the run does not start.
func TestUnconfirmedRunnerGetsNoCode(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		rt := &confirmingRuntime{fakeRuntime: newFake(pythonRunner(t))}
		if refuse {
			rt.err = errors.New("another pod took its name")
		}
		tmp, err := os.MkdirTemp("", "bt-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		ex, err := NewExecutor(context.Background(), rt, ExecutorOptions{Image: "test-image", RunRoot: filepath.Join(tmp, "runs"), Logger: zerolog.New(io.Discard)})
		if err != nil {
			t.Fatal(err)
		}
		mark := filepath.Join(tmp, "ran")
		res, err := ex.Run(context.Background(), Request{Code: "open(" + pyString(mark) + ", 'w').write('x')", Limits: testLimits()})
		_, statErr := os.Stat(mark)
		switch {
		case rt.asked.Load() != 1:
			t.Errorf("refuse=%v: Confirm asked %d times", refuse, rt.asked.Load())
		case !refuse && (err != nil || res.Status != StatusOK || statErr != nil):
			t.Errorf("a confirmed runner: %v %+v %v", err, res, statErr)
		case refuse && (res.Status == StatusOK || statErr == nil || !strings.Contains(res.Message+errString(err), "another pod took its name")):
			t.Errorf("an unconfirmed runner got the code: %v %+v (mark: %v)", err, res, statErr)
		}
		if left, _ := rt.List(context.Background(), nil); len(left) != 0 {
			t.Errorf("refuse=%v: containers left: %v", refuse, left)
		}
	}
}

func pyString(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
