package tokenize_test

import (
	"fmt"

	"github.com/bridge-mcp/bridge/internal/tokenize"
)

// Personal data in a tool's result reaches the sandbox as placeholders;
// the same placeholders in the arguments of a later call are restored to
// the values, for the tools the policy names.
func ExampleVault() {
	email, _ := tokenize.Builtin("email")
	v := tokenize.NewVault(100, 1<<20)
	out, n, err := v.Tokenize([]byte(`{"content":[{"type":"text","text":"Ada (ada@example.com) wrote twice"}]}`), []tokenize.Kind{email})
	fmt.Println(string(out), n, err)
	back, n, err := v.Restore([]byte(`{"to":"<EMAIL_1>","subject":"hi"}`))
	fmt.Println(string(back), n, err)
	// Output:
	// {"content":[{"type":"text","text":"Ada (<EMAIL_1>) wrote twice"}]} 1 <nil>
	// {"to":"ada@example.com","subject":"hi"} 1 <nil>
}
