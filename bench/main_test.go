package bench

import (
	"testing"

	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// TestMain removes the binaries the benchmarks built (nodetest.Binaries)
// after the run.
func TestMain(m *testing.M) { nodetest.Main(m) }
