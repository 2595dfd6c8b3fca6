package link

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// attachCut is where an Attach cut short (the provisioner killed between
// a rename and the namespace move) leaves the host link ndv0: down, with
// the pod's MAC and MTU, under name, in the host (inPod false) or the pod.
func attachCut(t *testing.T, r *rig, name string, inPod bool) {
	t.Helper()
	l, err := r.host.LinkByName("ndv0")
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := parseMAC("mac", podMAC)
	steps := []func() error{
		func() error { return r.host.LinkSetDown(l) },
		func() error { return r.host.LinkSetHardwareAddr(l, mac) },
		func() error { return r.host.LinkSetMTU(l, 1400) },
	}
	if inPod {
		ns, err := netns.GetFromPath(r.podPath)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		steps = append(steps, func() error { return r.host.LinkSetNsFd(l, int(ns)) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	h := r.host
	if inPod {
		h = r.pod
	}
	l, err = h.LinkByName("ndv0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetName(l, name); err != nil {
		t.Fatal(err)
	}
}

// TestMover_Attach_Resumes: an Attach cut short between its rename and its
// move leaves the link under another name, on either side; Attach again
// finishes the job from there (the link in the pod as net1, configured,
// nothing left in the host), and Detach brings it home as it was. A Detach
// of a device whose Attach was cut short in the host (its pod gone before
// the Attach was tried again) brings it home too.
func TestMover_Attach_Resumes(t *testing.T) {
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 1400, Addresses: []string{"10.9.0.2/24"}}
	for _, tc := range []struct {
		name  string
		as    string
		inPod bool
	}{
		{"renamed in the host, not moved", "net1", false},
		{"renamed to a crossing name in the host, not moved", "netdra0badf00d", false},
		{"moved under its host name, not renamed in the pod", "ndv0", true},
		{"moved under a crossing name, not renamed in the pod", "netdra0badf00d", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, before, orig := rigWithDevice(t)
			ctx := t.Context()
			attachCut(t, r, tc.as, tc.inPod)
			if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, cfg); err != nil {
				t.Fatalf("Attach after a cut-short one: %v", err)
			}
			want := &view{Name: "net1", MAC: podMAC, MTU: 1400, Up: true, Addresses: []string{"10.9.0.2/24"}}
			if diff := cmp.Diff(want, viewOf(t, r.pod, "net1")); diff != "" {
				t.Errorf("pod link (-want +got):\n%s", diff)
			}
			for _, n := range []string{"ndv0", "net1", "netdra0badf00d"} {
				if v := viewOf(t, r.host, n); v != nil {
					t.Errorf("left in the host: %+v", v)
				}
			}
			if err := r.mover.Detach(ctx, orig, r.podPath, cfg); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, viewOf(t, r.host, "ndv0")); diff != "" {
				t.Errorf("host link after Detach (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("detached before it was tried again", func(t *testing.T) {
		r, before, orig := rigWithDevice(t)
		attachCut(t, r, "net1", false)
		if err := r.mover.Detach(t.Context(), orig, r.podPath, cfg); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, viewOf(t, r.host, "ndv0")); diff != "" {
			t.Errorf("host link (-want +got):\n%s", diff)
		}
		if v := viewOf(t, r.host, "net1"); v != nil {
			t.Errorf("left in the host: %+v", v)
		}
	})
}

// TestMover_Attach_LeavesOthersLinks: a host link under the pod's name that
// is not the device's (up, or another MAC) is not taken for an Attach cut
// short: the Attach of a device that is nowhere fails with
// ErrLinkNotFound, and that link is left as it was.
func TestMover_Attach_LeavesOthersLinks(t *testing.T) {
	for _, tc := range []struct {
		name string
		veth netnstest.Veth
	}{
		{"up", netnstest.Veth{Name: "net1", Peer: "ndp1", MAC: podMAC, MTU: 1400}},
		{"another MAC", netnstest.Veth{Name: "net1", Peer: "ndp1", MAC: "02:00:00:00:00:77", MTU: 1400, Down: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			netnstest.AddVeth(t, r.host, tc.veth)
			before := viewOf(t, r.host, "net1")
			orig := &devicev1.LinkSnapshot{Name: "ndv0", MacAddress: hostMAC, Mtu: 1500, Up: true}
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 1400}
			if err := r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg); !errors.Is(err, ErrLinkNotFound) {
				t.Fatalf("Attach of a device that is nowhere: %v, want ErrLinkNotFound", err)
			}
			if diff := cmp.Diff(before, viewOf(t, r.host, "net1")); diff != "" {
				t.Errorf("the other link (-want +got):\n%s", diff)
			}
			if v := viewOf(t, r.pod, "net1"); v != nil {
				t.Errorf("moved into the pod: %+v", v)
			}
		})
	}
}
