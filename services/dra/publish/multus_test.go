package publish

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// TestMultusAttributes: a pool with a multusResourceName publishes it and
// each device's Multus device ID: a VF's PCI address, a host veth's kernel
// interface name, a not yet created sub-interface's device name; a pool
// without one publishes neither.
func TestMultusAttributes(t *testing.T) {
	vf := &devicev1.Device{Name: "0000-03-02-0", KernelIfName: "ens1f0v0", PciAddress: "0000:03:02.0"}
	veth := &devicev1.Device{Name: "data0", KernelIfName: "data0"}
	subif := &devicev1.Device{Name: "mv-0"}
	for _, tc := range []struct {
		name         string
		resourceName string
		dev          *devicev1.Device
		want         attrs
	}{
		{name: "not configured", dev: vf},
		{name: "VF: its PCI address", resourceName: "intel.com/sriov_vf", dev: vf,
			want: attrs{AttrMultusResourceName: strAttr("intel.com/sriov_vf"), AttrMultusDeviceID: strAttr("0000:03:02.0")}},
		{name: "veth: its kernel name", resourceName: "example.com/net", dev: veth,
			want: attrs{AttrMultusResourceName: strAttr("example.com/net"), AttrMultusDeviceID: strAttr("data0")}},
		{name: "sub-interface: its device name", resourceName: "subs", dev: subif,
			want: attrs{AttrMultusResourceName: strAttr("subs"), AttrMultusDeviceID: strAttr("mv-0")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, attrs(MultusAttributes(tc.resourceName, tc.dev))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestResources_Multus: Resources publishes the Multus attributes on the
// devices of the pool configured for them only, beside the device's own,
// and they win over a manager attribute of the same name.
func TestResources_Multus(t *testing.T) {
	forged := &devicev1.Device{Name: "b", KernelIfName: "eth1",
		Attributes: map[string]string{string(AttrMultusResourceName): "forged/name"}}
	res := Resources([]Pool{
		{Name: "multus", MultusResourceName: "intel.com/sriov_vf", Devices: []*devicev1.Device{
			{Name: "a", PciAddress: "0000:03:02.0"}, forged}},
		{Name: "plain", Devices: []*devicev1.Device{{Name: "c", KernelIfName: "eth2"}}},
	})
	got := map[string][2]string{}
	for _, p := range []string{"multus", "plain"} {
		for _, d := range res.Pools[p].Slices[0].Devices {
			var v [2]string
			if a, ok := d.Attributes[AttrMultusResourceName]; ok {
				v[0] = *a.StringValue
			}
			if a, ok := d.Attributes[AttrMultusDeviceID]; ok {
				v[1] = *a.StringValue
			}
			if d.Attributes["pool"].StringValue == nil {
				t.Errorf("device %s lost its own attributes: %v", d.Name, d.Attributes)
			}
			got[d.Name] = v
		}
	}
	want := map[string][2]string{"a": {"intel.com/sriov_vf", "0000:03:02.0"}, "b": {"intel.com/sriov_vf", "eth1"}, "c": {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
