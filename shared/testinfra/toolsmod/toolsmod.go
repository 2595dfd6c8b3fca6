// Package toolsmod builds a pinned tool of shared/tools (grpcurl, helm,
// promtool, controller-gen) for a test run outside make: from the tools
// module's sources at the versions its go.mod pins, never a prebuilt
// binary. make builds the same tools into .tools/bin and passes them to
// the tests through their environment variables.
package toolsmod

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// Dir is the tools module's directory, relative to the repository's root.
const Dir = "shared/tools"

// Find returns the tools module's directory: the first ancestor of the
// working directory (a test's package directory) holding Dir/go.mod. Its
// error means the test does not run inside a checkout of the repository.
func Find() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		mod := filepath.Join(d, Dir)
		if _, err := os.Stat(filepath.Join(mod, "go.mod")); err == nil {
			return mod, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("no %s/go.mod above %s", Dir, wd)
		}
	}
}

// Build compiles the tool whose main package is pkg (one of the tools
// module's tool directives) with the build tags tags, into the user cache,
// and returns the binary's path. Go's build cache makes every call after
// the first cheap.
func Build(pkg, tags string) (string, error) {
	mod, err := Find()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache dir for %s: %w", pkg, err)
	}
	bin := filepath.Join(cache, "netdra", "tools", path.Base(pkg))
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags="+tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("building %s in %s: %w", pkg, mod, err), errors.New(string(out)))
	}
	return bin, nil
}
