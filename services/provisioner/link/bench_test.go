package link

import (
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// BenchmarkMover_AttachDetach_Veth attaches a veth with a full config
// (rename, MAC, MTU, two addresses, a route) and detaches it, two namespace
// moves an iteration; moves/s is what RTNL lets through.
func BenchmarkMover_AttachDetach_Veth(b *testing.B) {
	r := newRig(b)
	addVeth(b, r.host, "ndv0", "ndp0", hostMAC, 1500, true)
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
