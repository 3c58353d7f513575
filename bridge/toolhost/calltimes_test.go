package toolhost

import (
	"testing"
	"time"
)

func TestCallTimes(t *testing.T) {
	var none *CallTimes
	none.record(time.Second, time.Millisecond) // a nil CallTimes records nothing, and does not panic

	c := NewCallTimes()
	if s := c.Summary(); s != (CallTimesSummary{}) {
		t.Fatalf("empty: %+v", s)
	}
	// 100 calls: the bridge's part i µs (1..100), the upstream's 1 ms.
	for i := 1; i <= 100; i++ {
		c.record(time.Millisecond+time.Duration(i)*time.Microsecond, time.Millisecond)
	}
	s := c.Summary()
	if s.Calls != 100 || s.Window != 100 || s.BridgeP50 != 50 || s.BridgeP99 != 99 || s.UpstreamP50 != 1000 {
		t.Fatalf("after 100 calls: %+v", s)
	}
	// The window keeps the latest calls only: these replace all of them.
	for range callTimesWindow {
		c.record(3*time.Millisecond, 2*time.Millisecond)
	}
	s = c.Summary()
	if s.Calls != 100+callTimesWindow || s.Window != callTimesWindow || s.BridgeP50 != 1000 || s.BridgeP99 != 1000 || s.UpstreamP50 != 2000 {
		t.Fatalf("after the window turned over: %+v", s)
	}
	// A clock that makes the upstream's part longer than the whole is not a negative cost.
	c.record(time.Microsecond, 2*time.Microsecond)
	if s := c.Summary(); s.BridgeP50 < 0 {
		t.Fatalf("negative bridge time: %+v", s)
	}
}
