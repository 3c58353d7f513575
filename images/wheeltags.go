package images

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// The Python of every runner image: Debian bookworm's python3 (the BASE of
// Dockerfile.runner, debian:bookworm-slim; TestPythonOfTheBase ties the
// two), on bookworm's glibc. A wheel must fit them to install.
const (
	PythonVersion = "3.11"
	pythonMinor   = 11
	glibcMajor    = 2
	glibcMinor    = 36
	// baseImage is Dockerfile.runner's BASE, which the values above describe.
	baseImage = "debian:bookworm-slim"
)

// Arch is the machine name (uname -m) of the images the engine on this
// machine builds and runs: x86_64 or aarch64; "" for another (the platform
// of wheels is then not checked).
func Arch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return ""
}

// legacyManylinux are the glibc versions of the older manylinux names.
var legacyManylinux = map[string][2]int{"manylinux1": {2, 5}, "manylinux2010": {2, 12}, "manylinux2014": {2, 17}}

// CheckWheelTags says whether the wheel file name (PEP 427:
// NAME-VERSION(-BUILD)?-PYTHON-ABI-PLATFORM.whl, each tag possibly a
// "."-separated set, PEP 425) fits the runner images' CPython 3.11 on
// Debian's glibc for arch (x86_64, aarch64; "" checks no platform), and
// when not, why and what would.
func CheckWheelTags(name, arch string) error {
	parts := strings.Split(strings.TrimSuffix(filepath.Base(name), ".whl"), "-")
	if len(parts) < 5 {
		return fmt.Errorf("%s is not a wheel's file name (NAME-VERSION-PYTHON-ABI-PLATFORM.whl, PEP 427)", name)
	}
	pys, abis, plats := strings.Split(parts[len(parts)-3], "."), strings.Split(parts[len(parts)-2], "."), strings.Split(parts[len(parts)-1], ".")
	pyOK, platOK, musl := false, false, false
	for _, plat := range plats {
		ok, isMusl := platformFits(plat, arch)
		platOK, musl = platOK || ok, musl || isMusl
	}
	for _, py := range pys {
		for _, abi := range abis {
			pyOK = pyOK || pythonFits(py, abi)
		}
	}
	if pyOK && platOK {
		return nil
	}
	tags := fmt.Sprintf("python %s, abi %s, platform %s", parts[len(parts)-3], parts[len(parts)-2], parts[len(parts)-1])
	target := "CPython " + PythonVersion + " on Debian bookworm (glibc " + strconv.Itoa(glibcMajor) + "." + strconv.Itoa(glibcMinor) + ")"
	if arch != "" {
		target += " for " + arch
	}
	var why []string
	if !pyOK {
		why = append(why, "its Python tags do not fit: the image takes cp311-cp311, cp3X-abi3 (X up to 11), or py3-none (also py3X, X up to 11)")
	}
	switch {
	case platOK:
	case musl:
		why = append(why, "it is built for musl libc (Alpine), and Debian has glibc: take the manylinux wheel")
	default:
		why = append(why, "its platform does not fit: the image takes any, linux_"+archOr(arch)+", manylinux1/2010/2014_"+archOr(arch)+
			" or manylinux_2_N_"+archOr(arch)+" with N up to "+strconv.Itoa(glibcMinor))
	}
	return fmt.Errorf("--wheels: %s (%s) does not install on the runner image's %s: %s; download the wheel for it "+
		"(`pip download --only-binary :all: --platform manylinux2014_%s --python-version %s -d DIR PKG`), "+
		"or install the package from Debian (--apt python3-NAME)",
		name, tags, target, strings.Join(why, "; "), archOr(arch), PythonVersion)
}

func archOr(arch string) string {
	if arch == "" {
		return "ARCH"
	}
	return arch
}

// pythonFits says whether a wheel of the python tag py and abi tag abi
// installs on CPython 3.11 (pip's compatible tags for it).
func pythonFits(py, abi string) bool {
	switch abi {
	case "cp311":
		return py == "cp311"
	case "abi3":
		minor, ok := minorOf(py, "cp3")
		return ok && minor >= 2 && minor <= pythonMinor
	case "none":
		if py == "py3" || py == "cp311" {
			return true
		}
		minor, ok := minorOf(py, "py3")
		return ok && minor <= pythonMinor
	}
	return false
}

// minorOf reads the minor version of a tag such as py310 or cp39 after its
// prefix (py3, cp3).
func minorOf(tag, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(tag, prefix)
	if !ok || rest == "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// platformFits says whether a wheel of the platform tag plat installs on
// Debian bookworm for arch ("" for any arch), and whether plat is musl's.
func platformFits(plat, arch string) (fits, musl bool) {
	if plat == "any" {
		return true, false
	}
	if strings.HasPrefix(plat, "musllinux_") {
		return false, true
	}
	archOK := func(tail string) bool { return arch == "" || tail == arch }
	if tail, ok := strings.CutPrefix(plat, "linux_"); ok {
		return archOK(tail), false
	}
	for legacy, glibc := range legacyManylinux {
		if tail, ok := strings.CutPrefix(plat, legacy+"_"); ok {
			return archOK(tail) && glibcFits(glibc[0], glibc[1]), false
		}
	}
	// manylinux_X_Y_ARCH (PEP 600); ARCH may hold "_" (x86_64).
	if rest, ok := strings.CutPrefix(plat, "manylinux_"); ok {
		f := strings.SplitN(rest, "_", 3)
		if len(f) != 3 {
			return false, false
		}
		x, errX := strconv.Atoi(f[0])
		y, errY := strconv.Atoi(f[1])
		return errX == nil && errY == nil && archOK(f[2]) && glibcFits(x, y), false
	}
	return false, false
}

// glibcFits says whether glibc x.y is at most bookworm's.
func glibcFits(x, y int) bool {
	return x < glibcMajor || x == glibcMajor && y <= glibcMinor
}
