// Package helm finds the pinned helm for the test world's tests: $HELM
// (the Makefile's copy in .tools/bin) or helm installed from its Go module
// into the user cache, never a prebuilt binary. No helm package is linked:
// the tests run the helm command as a user does.
package helm

import (
	"testing"

	"github.com/netdra/netdra/shared/testinfra/testworld/internal/pinned"
)

// Module is the pinned helm; the Makefile's HELM_VERSION is the same.
const Module = "helm.sh/helm/v3/cmd/helm@v3.22.0"

var tool = pinned.Tool{Env: "HELM", Module: Module}

// Binary returns the helm binary: $HELM, or helm installed once per test
// binary (minutes cold: go install compiles helm).
func Binary(t testing.TB) string {
	t.Helper()
	return tool.Binary(t)
}
