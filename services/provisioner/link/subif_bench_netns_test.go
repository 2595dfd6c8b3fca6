package link

import (
	"testing"
	"time"

	"github.com/netdra/netdra/bench/figures"
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// BenchmarkAttach_SubifVsMove times one device's attach and detach with
// the same full config (rename, MAC, MTU 1400, two addresses, a route)
// two ways: a veth moved into the pod and back (the kernel's baseline:
// one namespace move each way) and a macvlan sub-interface created in the
// pod and deleted there (CreateSub/RemoveSub: no move). attach-ms and
// detach-ms are the means; with $NETDRA_BENCH_OUT set they are recorded
// (bench/figures.SubifFile) for `make bench`'s report, which sets them
// side by side.
func BenchmarkAttach_SubifVsMove(b *testing.B) {
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 1400,
		Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"},
		Routes:    []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}}}
	sub := &devicev1.SubInterface{Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN,
		Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE, ParentIfName: "ndpar0"}
	for _, tc := range []struct {
		name           string
		attach, detach func(r *rig, orig *devicev1.LinkSnapshot) error
	}{
		{"move-veth",
			func(r *rig, o *devicev1.LinkSnapshot) error {
				return r.mover.Attach(b.Context(), "ndv0", o, r.podPath, cfg)
			},
			func(r *rig, o *devicev1.LinkSnapshot) error { return r.mover.Detach(b.Context(), o, r.podPath, cfg) }},
		{"create-macvlan",
			func(r *rig, o *devicev1.LinkSnapshot) error {
				return r.mover.CreateSub(b.Context(), sub, o, r.podPath, cfg)
			},
			func(r *rig, o *devicev1.LinkSnapshot) error {
				return r.mover.RemoveSub(b.Context(), sub, o, r.podPath, cfg)
			}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := newRig(b)
			netnstest.AddVeth(b, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
			netnstest.AddVeth(b, r.host, netnstest.Veth{Name: "ndpar0", Peer: "ndpar0p", MTU: 1500})
			orig, err := r.mover.Snapshot(b.Context(), "ndv0")
			if err != nil {
				b.Fatal(err)
			}
			var attach, detach time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := tc.attach(r, orig); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := tc.detach(r, orig); err != nil {
					b.Fatal(err)
				}
				attach, detach = attach+t1.Sub(t0), detach+time.Since(t1)
			}
			rec := figures.Subif{Way: tc.name, N: b.N,
				AttachMs: float64(attach.Microseconds()) / 1000 / float64(b.N), DetachMs: float64(detach.Microseconds()) / 1000 / float64(b.N)}
			b.ReportMetric(rec.AttachMs, "attach-ms")
			b.ReportMetric(rec.DetachMs, "detach-ms")
			if err := figures.Record(figures.SubifFile, rec); err != nil {
				b.Fatal(err)
			}
		})
	}
}
