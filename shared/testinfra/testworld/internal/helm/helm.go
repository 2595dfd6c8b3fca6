// Package helm finds the pinned helm for the test world's tests: $HELM
// (the Makefile's copy in .tools/bin) or helm built from the tools module
// into the user cache, never a prebuilt binary. No helm package is linked:
// the tests run the helm command as a user does.
package helm

import (
	"testing"

	"github.com/netdra/netdra/shared/testinfra/testworld/internal/pinned"
)

// Package is helm's main package, pinned by shared/tools/go.mod.
const Package = "helm.sh/helm/v3/cmd/helm"

var tool = pinned.Tool{Env: "HELM", Package: Package}

// Binary returns the helm binary: $HELM, or helm installed once per test
// binary (minutes cold: go build compiles helm).
func Binary(t testing.TB) string {
	t.Helper()
	return tool.Binary(t)
}
