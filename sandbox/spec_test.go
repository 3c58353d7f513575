package sandbox

import (
	"math"
	"strings"
	"testing"
)

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("default limits: %v", err)
	}
	tests := []struct {
		name string
		set  func(*Limits)
		want string
	}{
		{"zero timeout", func(l *Limits) { l.Timeout = 0 }, "timeout must be positive"},
		{"tiny memory", func(l *Limits) { l.Memory = 1 << 20 }, "memory limit must be at least 16 MiB"},
		{"zero cpus", func(l *Limits) { l.CPUs = 0 }, "cpus must be between"},
		{"NaN cpus", func(l *Limits) { l.CPUs = math.NaN() }, "cpus must be between"},
		{"Inf cpus", func(l *Limits) { l.CPUs = math.Inf(1) }, "cpus must be between"},
		{"huge cpus", func(l *Limits) { l.CPUs = 1e30 }, "cpus must be between"},
		{"quota under the kernel minimum", func(l *Limits) { l.CPUs = 0.000001 }, "cpus must be between"},
		{"few pids", func(l *Limits) { l.Pids = 2 }, "pids limit must be at least 8"},
		{"small tmpfs", func(l *Limits) { l.TmpfsSize = 1000 }, "tmpfs size must be at least 1 MiB"},
		{"few files", func(l *Limits) { l.NoFile = 10 }, "nofile limit must be at least 64"},
		{"nproc under pids", func(l *Limits) { l.NProc = 10 }, "nproc limit (10) must be at least the pids limit"},
		{"small output cap", func(l *Limits) { l.OutputBytes = 10 }, "output cap must be at least 1 KiB"},
	}
	for _, tt := range tests {
		l := DefaultLimits()
		tt.set(&l)
		err := l.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	l := DefaultLimits()
	l.CPUs = 0.01
	if err := l.Validate(); err != nil {
		t.Errorf("0.01 cpus: %v", err)
	}
	if q := NewSpec("r", "i", "/d", "t", l).CPUQuota; q != 1000 {
		t.Errorf("0.01 cpus gives quota %d, want 1000", q)
	}
}
