package deploytest

import (
	"testing"

	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

func TestMain(m *testing.M) { worldtest.Main(m) }
