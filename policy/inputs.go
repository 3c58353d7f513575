package policy

import (
	"go.yaml.in/yaml/v3"
)

var inputsKeys = []string{"max_files", "max_file_bytes", "max_bytes"}

// Inputs bound the files a call of run_python passes in (its inputs
// argument), which the runner writes under /tmp/inputs before the code
// runs. They are written in the run's /tmp, so the sandbox's tmpfs_size
// bounds them too, whatever these say.
type Inputs struct {
	MaxFiles     int   // files one call passes; 20 (0 to 1000; 0 refuses inputs)
	MaxFileBytes int64 // the largest one; 32Mi (0 to 16Gi)
	MaxBytes     int64 // all of one call's together; 32Mi (0 to 16Gi), at least MaxFileBytes
}

// Bounds of the inputs keys.
const (
	maxInputFiles = 1000
	maxInputBytes = 16 << 30
)

func defaultInputs() Inputs {
	return Inputs{MaxFiles: 20, MaxFileBytes: 32 << 20, MaxBytes: 32 << 20}
}

// inputs reads the inputs section.
func (p *parser) inputs(k, v *yaml.Node, in *Inputs) {
	p.keys(k, v, "inputs", inputsKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "max_files":
			in.MaxFiles = int(p.integer(k, v, name, int64(in.MaxFiles), 0, maxInputFiles))
		case "max_file_bytes":
			in.MaxFileBytes = p.size(k, v, name, in.MaxFileBytes, 0, maxInputBytes)
		case "max_bytes":
			in.MaxBytes = p.size(k, v, name, in.MaxBytes, 0, maxInputBytes)
		}
	})
}
