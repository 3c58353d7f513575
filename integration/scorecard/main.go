// Command scorecard writes docs/security-scorecard.md: bridge scored case by
// case against public security yardsticks (yardsticks.yaml), from what the
// integration passes printed (`go test -v`, one log per pass, which `make
// integration` keeps). With -check it writes nothing and fails when the
// committed scorecard and the run disagree, which is how CI keeps the
// document true.
//
//	go run ./integration/scorecard -logs bin/scorecard -out docs/security-scorecard.md [-check]
package main

import (
	"bytes"
	_ "embed"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

//go:embed yardsticks.yaml
var catalogYAML []byte

func main() {
	logs := flag.String("logs", "bin/scorecard", "the folder of the passes' logs (rootful.log, gvisor.log, rootless.log, kubernetes.log)")
	out := flag.String("out", "docs/security-scorecard.md", "the scorecard to write, or with -check to compare")
	check := flag.Bool("check", false, "write nothing; fail when -out differs from what the logs say")
	flag.Parse()
	if err := run(*logs, *out, *check); err != nil {
		fmt.Fprintln(os.Stderr, "scorecard:", err)
		os.Exit(1)
	}
}

func run(logs, out string, check bool) error {
	cat, err := parseCatalog(catalogYAML)
	if err != nil {
		return err
	}
	res, err := readPasses(logs)
	if err != nil {
		return err
	}
	doc := render(cat, res)
	if !check {
		return os.WriteFile(out, doc, 0o644)
	}
	old, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("%w (run `make scorecard` after the integration passes, and commit it)", err)
	}
	if !bytes.Equal(old, doc) {
		fresh := filepath.Join(logs, filepath.Base(out))
		if err := os.WriteFile(fresh, doc, 0o644); err != nil {
			return err
		}
		return fmt.Errorf("%s disagrees with this run (what the run says: %s; diff them). A test that failed shows as FAILED there; "+
			"a case or test renamed shows as not run. Fix the cause, then `make scorecard` and commit the file", out, fresh)
	}
	fmt.Printf("scorecard: %s agrees with this run\n", out)
	return nil
}
