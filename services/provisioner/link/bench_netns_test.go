package link

import (
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// BenchmarkMover_AttachDetach_Veth attaches a veth with a full config
// (rename, MAC, MTU, two addresses, a route) and detaches it, two namespace
// moves an iteration; moves/s is what RTNL lets through.
func BenchmarkMover_AttachDetach_Veth(b *testing.B) {
	r := newRig(b)
	netnstest.AddVeth(b, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
	orig, err := r.mover.Snapshot(b.Context(), "ndv0")
	if err != nil {
		b.Fatal(err)
	}
	cfg := &devicev1.DeviceConfig{
		PodIfName:  "net1",
		MacAddress: podMAC,
		Mtu:        9000,
		Addresses:  []string{"192.0.2.10/24", "2001:db8::10/64"},
		Routes:     []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}},
	}
	ctx := b.Context()
	moves := 0
	for b.Loop() {
		if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, cfg); err != nil {
			b.Fatal(err)
		}
		if err := r.mover.Detach(ctx, orig, r.podPath, cfg); err != nil {
			b.Fatal(err)
		}
		moves += 2
	}
	b.ReportMetric(float64(moves)/b.Elapsed().Seconds(), "moves/s")
}

// BenchmarkMover_CreateRemove_Virtual creates a virtual link in the pod
// with the same full config and removes it: a dummy device's attach and
// detach, no namespace move (ifb stands in for dummy on kernels without
// it).
func BenchmarkMover_CreateRemove_Virtual(b *testing.B) {
	r := newRig(b)
	m, err := NewMover(testLogger(b), WithHostNetns(r.hostPath), WithVirtualKind(newIfb))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	cfg := &devicev1.DeviceConfig{
		PodIfName:  "net1",
		MacAddress: podMAC,
		Mtu:        9000,
		Addresses:  []string{"192.0.2.10/24", "2001:db8::10/64"},
		Routes:     []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}},
	}
	ctx := b.Context()
	for b.Loop() {
		if err := m.Create(ctx, dummyOrig, r.podPath, cfg); err != nil {
			b.Fatal(err)
		}
		if err := m.Remove(ctx, dummyOrig, r.podPath, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
