package deploytest

import (
	"testing"

	"github.com/netdra/netdra/shared/testworld/worldtest"
)

func TestMain(m *testing.M) { worldtest.Main(m) }
