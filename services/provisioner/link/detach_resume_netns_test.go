package link

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// TestMover_Detach_Resumes: a Detach cut short (the provisioner killed)
// leaves the link part of the way home; Detach again finishes the job from
// wherever it stopped.
func TestMover_Detach_Resumes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cut leaves the link where an interrupted Detach would.
		cut func(t *testing.T, r *rig)
	}{
		{"renamed in the pod, not moved", func(t *testing.T, r *rig) {
			l, err := r.pod.LinkByName("net1")
			if err != nil {
				t.Fatal(err)
			}
			mac, _ := parseMAC("mac", hostMAC)
			for _, err := range []error{r.pod.LinkSetDown(l), r.pod.LinkSetHardwareAddr(l, mac), r.pod.LinkSetMTU(l, 1500), r.pod.LinkSetName(l, "ndv0")} {
				if err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"moved, not set up", func(t *testing.T, r *rig) {
			l, err := r.pod.LinkByName("net1")
			if err != nil {
				t.Fatal(err)
			}
			mac, _ := parseMAC("mac", hostMAC)
			for _, err := range []error{r.pod.LinkSetDown(l), r.pod.LinkSetHardwareAddr(l, mac), r.pod.LinkSetMTU(l, 1500),
				r.pod.LinkSetName(l, "ndv0"), r.pod.LinkSetNsFd(l, int(r.mover.hostNs))} {
				if err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, before, orig := rigWithDevice(t)
			ctx := t.Context()
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 1400}
			if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, cfg); err != nil {
				t.Fatal(err)
			}
			tc.cut(t, r)
			if err := r.mover.Detach(ctx, orig, r.podPath, cfg); err != nil {
				t.Fatalf("Detach after a cut-short one: %v", err)
			}
			if diff := cmp.Diff(before, viewOf(t, r.host, "ndv0")); diff != "" {
				t.Errorf("host link (-want +got):\n%s", diff)
			}
			for _, n := range []string{"net1", "ndv0"} {
				if v := viewOf(t, r.pod, n); v != nil {
					t.Errorf("left in the pod: %+v", v)
				}
			}
		})
	}
}
