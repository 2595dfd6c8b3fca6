package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// BenchmarkServer_SetupRequest measures a Setup request as dra's prepare
// and nri's setup of a device that is missing again send it (the device's
// name and manager), for a VF with an ordinary claim's config: its size
// on the wire (B/req) and what gRPC does with it, the caller's marshal
// and the provisioner's unmarshal, per op.
func BenchmarkServer_SetupRequest(b *testing.B) {
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(100)), Mtu: 9000, Addresses: []string{"10.100.0.10/24"},
		Routes: []*devicev1.Route{{Destination: "10.200.0.0/16", Gateway: "10.100.0.1"}}}
	req := &provisionerv1.SetupRequest{DeviceName: "0000-3b-02-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		Config: cfg, Pool: "vf-net"}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, err := proto.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		var got provisionerv1.SetupRequest
		if err := proto.Unmarshal(buf, &got); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(wire)), "B/req")
}
