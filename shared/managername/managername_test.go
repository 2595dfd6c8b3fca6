package managername

import (
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// Every manager the protos know has a name of its own.
func TestOf(t *testing.T) {
	seen := map[string]devicev1.DeviceManager{}
	for v := range devicev1.DeviceManager_name {
		m := devicev1.DeviceManager(v)
		if m == devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED {
			continue
		}
		name := Of(m)
		if name == m.String() {
			t.Errorf("%s has no name", m)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s are both %q", m, other, name)
		}
		seen[name] = m
	}
}
