package main

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// catalog is yardsticks.yaml: each yardstick's cases, and the tests that
// perform each.
type catalog struct {
	Yardsticks []yardstick `yaml:"yardsticks"`
}

type yardstick struct {
	ID     string  `yaml:"id"`
	Name   string  `yaml:"name"`
	Source string  `yaml:"source"`
	Cases  []yCase `yaml:"cases"`
}

// yCase is one case of a yardstick: the tests that perform it against
// bridge, or why it does not apply (NA).
type yCase struct {
	ID     string   `yaml:"id"`
	Attack string   `yaml:"attack"`
	Holds  string   `yaml:"holds"`
	Tests  []string `yaml:"tests"`
	NA     string   `yaml:"na"`
}

// parseCatalog reads and checks the catalog: every case has tests or a
// reason it does not apply, never both.
func parseCatalog(b []byte) (catalog, error) {
	var c catalog
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("yardsticks.yaml: %w", err)
	}
	var errs []error
	ids := map[string]bool{}
	for _, y := range c.Yardsticks {
		if y.ID == "" || y.Name == "" || len(y.Cases) == 0 || ids[y.ID] {
			errs = append(errs, fmt.Errorf("yardstick %q: needs a unique id, a name and cases", y.ID))
		}
		ids[y.ID] = true
		seen := map[string]bool{}
		for _, k := range y.Cases {
			switch {
			case k.ID == "" || seen[k.ID]:
				errs = append(errs, fmt.Errorf("%s: case %q: needs a unique id", y.ID, k.ID))
			case (len(k.Tests) == 0) == (k.NA == ""):
				errs = append(errs, fmt.Errorf("%s/%s: give tests that perform it, or na: why it does not apply (not both)", y.ID, k.ID))
			case len(k.Tests) > 0 && k.Holds == "":
				errs = append(errs, fmt.Errorf("%s/%s: say what holds", y.ID, k.ID))
			}
			seen[k.ID] = true
		}
	}
	return c, errors.Join(errs...)
}

// testKey is a test's name as `go test -v` prints it, without the engine:
// spaces become underscores.
func testKey(name string) string {
	return strings.ReplaceAll(name, " ", "_")
}
