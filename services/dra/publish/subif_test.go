package publish

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

func subifDevice(name string, capacity, def uint64) *devicev1.Device {
	return &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, KernelIfName: name, Driver: "macvlan",
		BandwidthCapacity: capacity, BandwidthDefault: def,
		SubInterface: &devicev1.SubInterface{Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN,
			Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE, ParentIfName: "eth1"}}
}

// A parent shared by bandwidth is one device that many claims are
// allocated at once, with a consumable bandwidth: its capacity, a default
// share, a share of 1M to the whole. A counted sub-interface is one
// claim's.
func TestDevice_SharedBandwidth(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		dev                  *devicev1.Device
		value, def, min, max string
	}{
		{"a default share", subifDevice("mvs", 10_000_000_000, 100_000_000), "10G", "100M", "1M", "10G"},
		{"whole by default", subifDevice("mvs", 1_000_000_000, 0), "1G", "1G", "1M", "1G"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Device("subs", tc.dev)
			if got.AllowMultipleAllocations == nil || !*got.AllowMultipleAllocations {
				t.Fatalf("allowMultipleAllocations %v, want true", got.AllowMultipleAllocations)
			}
			c, ok := got.Capacity[CapacityBandwidth]
			if !ok || c.RequestPolicy == nil || c.RequestPolicy.ValidRange == nil {
				t.Fatalf("capacity %v, want bandwidth with a request policy", got.Capacity)
			}
			pol := c.RequestPolicy
			for _, q := range []struct {
				what string
				got  *resource.Quantity
				want string
			}{{"value", &c.Value, tc.value}, {"default", pol.Default, tc.def}, {"min", pol.ValidRange.Min, tc.min}, {"max", pol.ValidRange.Max, tc.max}} {
				if q.got == nil || q.got.Cmp(resource.MustParse(q.want)) != 0 {
					t.Errorf("%s %v, want %s", q.what, q.got, q.want)
				}
			}
			if got.Attributes[attrParent].StringValue == nil || *got.Attributes[attrParent].StringValue != "eth1" {
				t.Errorf("parentIfName %v, want eth1", got.Attributes[attrParent])
			}
		})
	}
	counted := Device("subs", subifDevice("mv-0", 0, 0))
	if counted.AllowMultipleAllocations != nil || counted.Capacity != nil {
		t.Errorf("a counted sub-interface published %v, %v; want one claim's device", counted.AllowMultipleAllocations, counted.Capacity)
	}
}
