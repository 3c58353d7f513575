package engines

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

func TestRefuseGVisorDataMounts(t *testing.T) {
	var removed []string
	remove := func(_ context.Context, id string) error { removed = append(removed, id); return nil }
	err := RefuseGVisorDataMounts(context.Background(), remove, "create container c", "abc")
	if !errors.Is(err, sandbox.ErrDataMountsGVisor) || !strings.Contains(err.Error(), "Run gVisor through Podman") || !slices.Equal(removed, []string{"abc"}) {
		t.Errorf("err %v, removed %v", err, removed)
	}
	removed = nil
	if err := RefuseGVisorDataMounts(context.Background(), remove, "create container c", ""); !errors.Is(err, sandbox.ErrDataMountsGVisor) || removed != nil {
		t.Errorf("before create: err %v, removed %v", err, removed)
	}
}

func TestCheckRuntimeOf(t *testing.T) {
	for _, tt := range []struct {
		want, got string
		refused   bool
	}{
		{"", "runc", false},
		{"runsc", "runsc", false},
		{"runsc", "/usr/bin/runsc", false},
		{"runsc", "runc", true},
		{"runc", "runsc", true},
		{"runsc", "", true},
		{"runsc", "unknown (inspect failed)", true},
	} {
		var removed []string
		remove := func(_ context.Context, id string) error { removed = append(removed, id); return nil }
		err := CheckRuntimeOf(context.Background(), remove, "create container x", "c1", tt.want, tt.got)
		if (err != nil) != tt.refused || (len(removed) == 1) != tt.refused {
			t.Errorf("want %q, got %q: err %v, removed %v", tt.want, tt.got, err, removed)
		}
		if err != nil && (!errors.Is(err, sandbox.ErrOCIRuntime) || !strings.Contains(err.Error(), "no code was run")) {
			t.Errorf("err = %v", err)
		}
	}
	// A removal that fails is reported too.
	err := CheckRuntimeOf(context.Background(), func(context.Context, string) error { return errors.New("engine gone") },
		"create container x", "c1", "runsc", "runc")
	if !errors.Is(err, sandbox.ErrOCIRuntime) || !strings.Contains(err.Error(), "engine gone") {
		t.Errorf("err = %v", err)
	}
}
