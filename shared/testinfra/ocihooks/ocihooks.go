// Package ocihooks runs OCI hooks as a container runtime does, for tests
// and benchmarks that stand in for the runtime.
package ocihooks

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/containerd/nri/pkg/api"
)

// Run runs OCI hooks as runc runs a container's createRuntime hooks:
// one after the other, each with its arguments and the OCI state on its
// stdin. The first failure is the error, with what the hook said.
func Run(ctx context.Context, hooks []*api.Hook) error {
	for _, h := range hooks {
		cmd := exec.CommandContext(ctx, h.GetPath())
		cmd.Args = h.GetArgs()
		cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.0","id":"ctr","status":"creating","pid":1}`)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("hook %q: %w: %s", h.GetArgs(), err, out)
		}
	}
	return nil
}
