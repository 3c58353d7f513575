package images

import (
	"strings"
	"testing"
)

// `bridge image build` makes only Name: the hints name it for that image
// alone, and say what to do about any other.
func TestHints(t *testing.T) {
	for _, tt := range []struct {
		name, image     string
		missing, broken []string
		not             []string
	}{
		{"built-in", Name(),
			[]string{"build it with `bridge image build --runtime docker`"},
			[]string{"rebuild it with `bridge image build --runtime docker`"},
			[]string{"not an image", "--image"}},
		{"custom", "localhost/nope:1",
			[]string{"localhost/nope:1 is not an image `bridge image build` makes", "it makes only " + Name(),
				"pull or build localhost/nope:1 yourself with docker", "drop --image (sandbox.image in a policy)"},
			[]string{"localhost/nope:1 is not an image `bridge image build` makes", "FROM " + Name(), "drop --image"},
			[]string{"build it with", "rebuild it with"}},
		{"another bridge's runner", Repository + ":000000000000",
			[]string{Repository + ":000000000000 is not an image `bridge image build` makes"},
			[]string{"is not an image `bridge image build` makes"},
			[]string{"build it with"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, b := MissingHint(tt.image, "docker"), RebuildHint(tt.image, "docker")
			for _, w := range tt.missing {
				if !strings.Contains(m, w) {
					t.Errorf("MissingHint %q does not say %q", m, w)
				}
			}
			for _, w := range tt.broken {
				if !strings.Contains(b, w) {
					t.Errorf("RebuildHint %q does not say %q", b, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(m, w) || strings.Contains(b, w) {
					t.Errorf("a hint says %q:\n%s\n%s", w, m, b)
				}
			}
		})
	}
}
