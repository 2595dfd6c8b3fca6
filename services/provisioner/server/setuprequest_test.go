package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// BenchmarkServer_SetupRequest measures a Setup request as dra's prepare
// (dra) and nri's setup of a device that is missing again (nri) send it,
// for a VF with an ordinary claim's config: its size on the wire (B/req)
// and what gRPC does with it, the caller's marshal and the provisioner's
// unmarshal, per op.
func BenchmarkServer_SetupRequest(b *testing.B) {
	// A VF as the provisioner returns it in a prepared device, which nri
	// holds in the allocation's row.
	vf := &devicev1.Device{Name: "0000-3b-02-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		KernelIfName: "ens1f0v1", PciAddress: "0000:3b:02.1", PfName: "ens1f0", VfIndex: new(int32(1)),
		VendorId: "0x8086", DeviceId: "0x154c", Driver: "iavf", NumaNode: new(int32(0)), PcieRoot: "pci0000:3a",
		MacAddress: "02:5e:8a:11:22:33", Mtu: 1500, LinkState: devicev1.LinkState_LINK_STATE_UP, RdmaDevice: "irdma1"}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(100)), Mtu: 9000, Addresses: []string{"10.100.0.10/24"},
		Routes: []*devicev1.Route{{Destination: "10.200.0.0/16", Gateway: "10.100.0.1"}}}
	for _, c := range []struct {
		name string
		req  *provisionerv1.SetupRequest
	}{
		{"dra", &provisionerv1.SetupRequest{Device: &devicev1.Device{Name: vf.GetName(), Manager: vf.GetManager()}, Config: cfg, Pool: "vf-net"}},
		{"nri", &provisionerv1.SetupRequest{Device: vf, Config: cfg, Pool: "vf-net", Share: vf.GetShare()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			wire, err := proto.Marshal(c.req)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				buf, err := proto.Marshal(c.req)
				if err != nil {
					b.Fatal(err)
				}
				var got provisionerv1.SetupRequest
				if err := proto.Unmarshal(buf, &got); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(wire)), "B/req")
		})
	}
}
