//go:build kernelrig

package dummy

// Free deletes dummy links an older provisioner created in the host, and
// Setup and Free must leave other dummy links alone; dummy links need the
// dummy module: these tests run only inside the kernel rig (make
// test-kernel). Each test works in its own throwaway network namespace,
// which the Manager is told is the host's (WithNetns).

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/hostns"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/kernelrig"
)

// rig is a throwaway "host" namespace, a handle in it and a Manager with
// count 4 whose host it is.
type rig struct {
	h *netlink.Handle
	m *Manager
}

func newRig(t *testing.T) *rig {
	t.Helper()
	kernelrig.Require(t)
	path := netnstest.New(t)
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Enabled: true, Count: 4}, WithNetns(path))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{h: netnstest.Handle(t, path), m: m}
}

// link returns the link name, or nil.
func (r *rig) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := hostns.Lookup(r.h, name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (r *rig) setup(t *testing.T, name string) (*devicev1.PreparedDevice, error) {
	t.Helper()
	return r.m.Setup(t.Context(), dummyDev(name), &devicev1.DeviceConfig{PodIfName: "net1"}, "")
}

// addDummy creates a dummy link name with MTU 9000, up, with the alias
// given: none for a link someone else made, link.CreatedAlias for one an
// older provisioner created at Setup.
func (r *rig) addDummy(t *testing.T, name, alias string) {
	t.Helper()
	if err := r.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 9000}}); err != nil {
		t.Fatalf("adding dummy %s: %v", name, err)
	}
	l := r.link(t, name)
	if err := r.h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	if alias != "" {
		if err := r.h.LinkSetAlias(l, alias); err != nil {
			t.Fatal(err)
		}
	}
}

func snapshotOf(t *testing.T, l netlink.Link) *devicev1.LinkSnapshot {
	t.Helper()
	a := l.Attrs()
	return &devicev1.LinkSnapshot{Name: a.Name, MacAddress: a.HardwareAddr.String(), Mtu: uint32(a.MTU), Up: a.Flags&net.FlagUp != 0}
}

// linkNames lists the links of the rig's host.
func (r *rig) linkNames(t *testing.T) []string {
	t.Helper()
	links, err := hostns.RetryDump(r.h.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	return names
}

// TestRig_SetupFreeTouchNothing: a dummy device's link is made in the pod
// at Attach, so Setup and Free change nothing in the host.
func TestRig_SetupFreeTouchNothing(t *testing.T) {
	r := newRig(t)
	before := r.linkNames(t)
	pd, err := r.setup(t, "dummy0")
	if err != nil {
		t.Fatalf("Setup() = %v", err)
	}
	if diff := cmp.Diff(before, r.linkNames(t)); diff != "" {
		t.Errorf("host links after Setup (-before +after):\n%s", diff)
	}
	if !pd.GetLinkCreated() || pd.GetOriginalLink().GetName() != "dummy0" {
		t.Errorf("prepared device %v, want link_created and the name dummy0", pd)
	}
	for i := range 2 {
		if err := r.m.Free(t.Context(), pd); err != nil {
			t.Fatalf("Free() #%d = %v, want nil", i+1, err)
		}
	}
	if diff := cmp.Diff(before, r.linkNames(t)); diff != "" {
		t.Errorf("host links after Free (-before +after):\n%s", diff)
	}
}

// TestRig_HostLinkOfTheSameName: a link called like the device in the host
// is not the device: Setup does not adopt it and Free leaves it as it was.
func TestRig_HostLinkOfTheSameName(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(t *testing.T, r *rig)
	}{
		{"someone else's dummy", func(t *testing.T, r *rig) { r.addDummy(t, "dummy1", "") }},
		{"a marked link that is not a dummy", func(t *testing.T, r *rig) {
			if err := r.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dummy1"}, PeerName: "peer1"}); err != nil {
				t.Fatal(err)
			}
			if err := r.h.LinkSetAlias(r.link(t, "dummy1"), link.CreatedAlias); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			tc.add(t, r)
			before := snapshotOf(t, r.link(t, "dummy1"))
			pd, err := r.setup(t, "dummy1")
			if err != nil {
				t.Fatalf("Setup() = %v", err)
			}
			if pd.GetOriginalLink().GetMacAddress() == before.GetMacAddress() {
				t.Errorf("Setup took the host link's MAC %s", before.GetMacAddress())
			}
			for i := range 2 {
				if err := r.m.Free(t.Context(), pd); err != nil {
					t.Fatalf("Free() #%d = %v, want nil", i+1, err)
				}
				l := r.link(t, "dummy1")
				if l == nil {
					t.Fatalf("Free #%d deleted the host's dummy1", i+1)
				}
				if diff := cmp.Diff(before, snapshotOf(t, l), protocmp.Transform()); diff != "" {
					t.Errorf("dummy1 after Free #%d (-before +after):\n%s", i+1, diff)
				}
			}
		})
	}
}

// TestRig_FreeDeletesOlderLink: an older provisioner created the link in the
// host at Setup, marked; Free of its prepared device deletes it (and of a
// prepared device that dra had to guess after a crash: name and
// link_created only).
func TestRig_FreeDeletesOlderLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		pd   *devicev1.PreparedDevice
	}{
		{"recorded", &devicev1.PreparedDevice{Device: dummyDev("dummy2"), LinkCreated: true,
			OriginalLink: &devicev1.LinkSnapshot{Name: "dummy2", MacAddress: "02:00:00:00:00:02", Mtu: 1500}}},
		{"guessed", &devicev1.PreparedDevice{Device: dummyDev("dummy2"), LinkCreated: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.addDummy(t, "dummy2", link.CreatedAlias)
			for i := range 2 {
				if err := r.m.Free(t.Context(), tc.pd); err != nil {
					t.Fatalf("Free() #%d = %v, want nil", i+1, err)
				}
				if l := r.link(t, "dummy2"); l != nil {
					t.Fatalf("dummy2 still exists after Free #%d", i+1)
				}
			}
		})
	}
}

// TestRig_FreeLeavesAdopted: a link an older provisioner adopted (no
// link_created) stays, mark or not.
func TestRig_FreeLeavesAdopted(t *testing.T) {
	r := newRig(t)
	r.addDummy(t, "dummy3", link.CreatedAlias)
	before := snapshotOf(t, r.link(t, "dummy3"))
	pd := &devicev1.PreparedDevice{Device: dummyDev("dummy3"), OriginalLink: before}
	if err := r.m.Free(t.Context(), pd); err != nil {
		t.Fatalf("Free() = %v", err)
	}
	if l := r.link(t, "dummy3"); l == nil {
		t.Fatal("Free deleted an adopted link")
	}
}

// TestRig_SetupUnknownDevice: a device beyond the count is refused.
func TestRig_SetupUnknownDevice(t *testing.T) {
	r := newRig(t)
	if _, err := r.setup(t, "dummy4"); err == nil {
		t.Fatal("Setup(dummy4) with count 4 succeeded")
	}
	if r.link(t, "dummy4") != nil {
		t.Error("a refused Setup created dummy4")
	}
}
