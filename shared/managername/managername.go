// Package managername names netdra's device managers as users write and
// read them: in a NodeConfig (deviceManagerConfigs, a pool filter's
// deviceManagers), in a ResourceSlice's deviceManager attribute, in a
// device's metadata and in errors. One table, so the four agree.
package managername

import devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"

// Of is the name of manager m ("sr-iov", "dummy", "host", "subif"); the
// enum's own name for one netdra does not know.
func Of(m devicev1.DeviceManager) string {
	switch m {
	case devicev1.DeviceManager_DEVICE_MANAGER_SRIOV:
		return "sr-iov"
	case devicev1.DeviceManager_DEVICE_MANAGER_DUMMY:
		return "dummy"
	case devicev1.DeviceManager_DEVICE_MANAGER_HOST:
		return "host"
	case devicev1.DeviceManager_DEVICE_MANAGER_SUBIF:
		return "subif"
	}
	return m.String()
}
