package proxy

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/rs/zerolog"
)

// BenchmarkProxyBigResult: a 4 MiB text result from a stdio upstream
// through the proxy to the bridge's side, as JSON ready for the relay.
// MB/s is bytes of result per second.
func BenchmarkProxyBigResult(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cfg := ServerConfig{Name: "alpha", Type: TypeStdio, Command: exe, Args: []string{"-test.run=^$"},
		Env: map[string]string{"PROXY_TEST_UPSTREAM": "1"}}
	p := New(Config{Servers: []ServerConfig{cfg}}, Options{Logger: zerolog.Nop()})
	defer p.Close()
	c, err := p.Connect(context.Background(), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const n = 4 << 20
	args := json.RawMessage(`{"n":4194304}`)
	if _, err := c.CallJSON(ctx, "bench", "alpha", "big", args); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	for b.Loop() {
		js, err := c.CallJSON(ctx, "bench", "alpha", "big", args)
		if err != nil || len(js) < n {
			b.Fatal(len(js), err)
		}
	}
}
