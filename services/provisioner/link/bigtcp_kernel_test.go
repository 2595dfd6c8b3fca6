//go:build kernelrig

package link

import (
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// TestKernel_IPv4SizesRefused: on a kernel without the IPv4 GSO/GRO max
// sizes (before Linux 6.3: it reports none for a link, as the rig's 6.1
// does), a claim's gsoIPv4MaxSize or groIPv4MaxSize is refused at Attach
// naming the field, and the link is back in the host with the GSO and GRO
// max sizes it had. On a kernel with them TestMover_BigTCPIPv4 applies
// them.
func TestKernel_IPv4SizesRefused(t *testing.T) {
	kernelrig.Require(t)
	for _, tc := range []struct {
		field string
		s     *devicev1.LinkSettings
	}{
		{"gsoIPv4MaxSize", &devicev1.LinkSettings{GsoMaxSize: u32p(32000), GsoIpv4MaxSize: u32p(32000)}},
		{"groIPv4MaxSize", &devicev1.LinkSettings{GroMaxSize: u32p(32000), GroIpv4MaxSize: u32p(32000)}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			r := newRig(t)
			netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
			l, err := r.host.LinkByName("ndv0")
			if err != nil {
				t.Fatal(err)
			}
			before := l.Attrs()
			if before.GSOIPv4MaxSize != 0 || before.GROIPv4MaxSize != 0 {
				t.Skipf("kernel %s has the IPv4 sizes (gso %d gro %d): TestMover_BigTCPIPv4 applies them", kernelRelease(t), before.GSOIPv4MaxSize, before.GROIPv4MaxSize)
			}
			orig := snapshotOf(t, r.host, "ndv0")
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", LinkSettings: tc.s}
			if orig.Settings, err = r.mover.ReadSettings(t.Context(), "ndv0", tc.s); err != nil {
				t.Fatal(err)
			}
			if err := r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg); !isField(err, tc.field) {
				t.Fatalf("kernel %s: Attach error = %v, want a field error for %s", kernelRelease(t), err, tc.field)
			}
			after, err := r.host.LinkByName("ndv0")
			if err != nil {
				t.Fatalf("ndv0 not back in the host after the refused Attach: %v", err)
			}
			if a := after.Attrs(); a.GSOMaxSize != before.GSOMaxSize || a.GROMaxSize != before.GROMaxSize {
				t.Errorf("ndv0 after the refused Attach: gso %d gro %d, want %d %d as before", a.GSOMaxSize, a.GROMaxSize, before.GSOMaxSize, before.GROMaxSize)
			}
		})
	}
}
