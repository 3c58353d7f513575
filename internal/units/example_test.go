package units_test

import (
	"fmt"

	"github.com/bridge-mcp/bridge/internal/units"
)

// Sizes are written as the policy file and the flags take them.
func ExampleParseSize() {
	n, err := units.ParseSize("512Mi")
	fmt.Println(n, err, units.FormatSize(n), units.Bytes(1536))
	_, err = units.ParseSize("512MB")
	fmt.Println(err)
	// Output:
	// 536870912 <nil> 512Mi 1.5 KiB
	// invalid size "512MB": write 512Mi for 1024s or 512M for 1000s (units are case-sensitive and take no B)
}
