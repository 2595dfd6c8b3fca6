// Package pinned finds a pinned Go tool for the test world's tests: the
// binary its environment variable names (the Makefile's copy in
// .tools/bin), or the tool built from the tools module (shared/tools) into
// the user cache, never a prebuilt binary.
package pinned

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/toolsmod"
)

// Tool is one pinned tool.
type Tool struct {
	// Env names the environment variable that may name the binary.
	Env string
	// Package is the tool's main package, one of shared/tools' tool
	// directives (which pin its version).
	Package string
	// Tags are the build tags it is installed with, if any.
	Tags string
	// Strict makes a missing or wrong Env fail under testenv.Strict instead
	// of installing the tool: CI passes the Makefile's copy, and a test that
	// built its own would hide a broken make target.
	Strict bool

	once sync.Once
	bin  string
	err  error
}

// Binary returns the tool's binary, found or installed once per test
// binary (minutes cold: go build compiles it); it fails the test when
// neither can be had.
func (tl *Tool) Binary(t testing.TB) string {
	t.Helper()
	tl.once.Do(func() { tl.bin, tl.err = tl.find() })
	if tl.err != nil {
		t.Fatal(tl.err)
	}
	return tl.bin
}

func (tl *Tool) find() (string, error) {
	if p := os.Getenv(tl.Env); p != "" {
		_, err := os.Stat(p)
		switch {
		case err == nil:
			return p, nil
		case tl.Strict:
			return "", fmt.Errorf("$%s: %w (make tools builds it into .tools/bin)", tl.Env, err)
		}
	}
	if tl.Strict && testenv.Strict() {
		return "", fmt.Errorf("$%s is not set, and %s=1 forbids building it in a test: run the tests through make (test-world sets it)", tl.Env, testenv.StrictEnv)
	}
	return toolsmod.Build(tl.Package, tl.Tags)
}
