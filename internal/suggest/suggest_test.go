package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0}, {"abc", "acb", 1},
		{"kitten", "sitting", 3}, {"timout", "timeout", 1}, {"ca", "abc", 3}, {"héllo", "hlélo", 1},
	} {
		if got := Distance([]rune(tc.a), []rune(tc.b)); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	long := make([]rune, MaxRunes+1)
	if got := Distance(long, []rune("a")); got != MaxRunes+1 {
		t.Errorf("past MaxRunes: %d", got)
	}
}

func TestKey(t *testing.T) {
	known := []string{"timeout", "max-timeout", "memory", "mcpServers", "servers", "output-limit"}
	for in, want := range map[string]string{
		"timout": "timeout", "TIMEOUT": "timeout", "mcp_servers": "mcpServers", "mcpservers": "mcpServers",
		"memroy": "memory", "outputlimit": "output-limit", "x": "", "zzzzzzzz": "", "srvers": "servers",
	} {
		if got := Key(in, known); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
}
