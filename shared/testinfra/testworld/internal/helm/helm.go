// Package helm finds the pinned helm for the test world's tests: $HELM
// (the Makefile's copy in .tools/bin) or helm installed from its Go module
// into the user cache, never a prebuilt binary. No helm package is linked:
// the tests run the helm command as a user does.
package helm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once   sync.Once
	bin    string
	binErr error
)

// Module is the pinned helm; the Makefile's HELM_VERSION is the same.
const Module = "helm.sh/helm/v3/cmd/helm@v3.22.0"

// Binary returns the helm binary, installed once per test binary when
// $HELM names none (minutes cold: go install compiles helm).
func Binary(t testing.TB) string {
	t.Helper()
	once.Do(func() { bin, binErr = find() })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

func find() (string, error) {
	if p := os.Getenv("HELM"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache dir for helm: %w", err)
	}
	gobin := filepath.Join(cache, "netdra", "tools")
	cmd := exec.Command("go", "install", Module)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing %s: %w\n%s", Module, err, out)
	}
	return filepath.Join(gobin, "helm"), nil
}
