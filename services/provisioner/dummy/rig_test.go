//go:build kernelrig

package dummy

// Setup and Free create and delete dummy links, which need the dummy module:
// these tests run only inside the kernel rig (make test-kernel). Each test
// works in its own throwaway network namespace, which the Manager is told
// is the host's (WithNetns).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/hostns"
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
	path := newNetns(t)
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Enabled: true, Count: 4}, WithNetns(path))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{h: dialPath(t, path), m: m}
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
	return r.m.Setup(t.Context(), dummyDev(name), &devicev1.DeviceConfig{PodIfName: "net1"})
}

// addDummy creates a dummy link name with MTU 9000, up, and no alias: a
// link someone else made.
func (r *rig) addDummy(t *testing.T, name string) {
	t.Helper()
	if err := r.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 9000}}); err != nil {
		t.Fatalf("adding dummy %s: %v", name, err)
	}
	if err := r.h.LinkSetUp(r.link(t, name)); err != nil {
		t.Fatal(err)
	}
}

func snapshotOf(t *testing.T, l netlink.Link) *devicev1.LinkSnapshot {
	t.Helper()
	a := l.Attrs()
	return &devicev1.LinkSnapshot{Name: a.Name, MacAddress: a.HardwareAddr.String(), Mtu: uint32(a.MTU), Up: a.Flags&net.FlagUp != 0}
}

func TestRig_SetupCreatesFreeDeletes(t *testing.T) {
	r := newRig(t)
	pd, err := r.setup(t, "dummy0")
	if err != nil {
		t.Fatalf("Setup() = %v", err)
	}
	l := r.link(t, "dummy0")
	if l == nil {
		t.Fatal("Setup did not create dummy0")
	}
	if l.Type() != "dummy" || l.Attrs().Alias != createdAlias {
		t.Errorf("dummy0 is a %s link with alias %q, want a dummy with alias %q", l.Type(), l.Attrs().Alias, createdAlias)
	}
	want := &devicev1.PreparedDevice{
		Device:       dummyDev("dummy0"),
		OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0", MacAddress: l.Attrs().HardwareAddr.String(), Mtu: 1500, Up: false},
		LinkCreated:  true,
	}
	if diff := cmp.Diff(want, pd, protocmp.Transform()); diff != "" {
		t.Errorf("prepared device (-want +got):\n%s", diff)
	}
	for i := range 2 {
		if err := r.m.Free(t.Context(), pd); err != nil {
			t.Fatalf("Free() #%d = %v, want nil", i+1, err)
		}
		if r.link(t, "dummy0") != nil {
			t.Fatalf("dummy0 still exists after Free #%d", i+1)
		}
	}
}

func TestRig_SetupAdoptsExistingDummy(t *testing.T) {
	r := newRig(t)
	r.addDummy(t, "dummy1")
	before := snapshotOf(t, r.link(t, "dummy1"))
	pd, err := r.setup(t, "dummy1")
	if err != nil {
		t.Fatalf("Setup() = %v", err)
	}
	want := &devicev1.PreparedDevice{Device: dummyDev("dummy1"), OriginalLink: before, LinkCreated: false}
	if diff := cmp.Diff(want, pd, protocmp.Transform()); diff != "" {
		t.Errorf("prepared device (-want +got):\n%s", diff)
	}
	for i := range 2 {
		if err := r.m.Free(t.Context(), pd); err != nil {
			t.Fatalf("Free() #%d = %v, want nil", i+1, err)
		}
		l := r.link(t, "dummy1")
		if l == nil {
			t.Fatalf("Free #%d deleted the adopted dummy1", i+1)
		}
		if diff := cmp.Diff(before, snapshotOf(t, l), protocmp.Transform()); diff != "" {
			t.Errorf("dummy1 after Free #%d (-before +after):\n%s", i+1, diff)
		}
	}
}

func TestRig_SetupRefusesOtherLink(t *testing.T) {
	r := newRig(t)
	if err := r.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dummy2"}, PeerName: "peer2"}); err != nil {
		t.Fatal(err)
	}
	before := snapshotOf(t, r.link(t, "dummy2"))
	pd, err := r.setup(t, "dummy2")
	if !errors.Is(err, ErrNotDummy) {
		t.Fatalf("Setup() = %v, %v; want ErrNotDummy", pd, err)
	}
	t.Log(err)
	l := r.link(t, "dummy2")
	if l == nil || l.Type() != "veth" {
		t.Fatalf("dummy2 is %v after a refused Setup, want the veth", l)
	}
	if diff := cmp.Diff(before, snapshotOf(t, l), protocmp.Transform()); diff != "" {
		t.Errorf("dummy2 changed (-before +after):\n%s", diff)
	}
}

// TestRig_SetupAgain is a Setup whose prepared device was lost (the agent
// stopped before the claim status recorded it): the link it created is
// taken again as created, and Free deletes it.
func TestRig_SetupAgain(t *testing.T) {
	r := newRig(t)
	first, err := r.setup(t, "dummy3")
	if err != nil {
		t.Fatalf("first Setup() = %v", err)
	}
	again, err := r.setup(t, "dummy3")
	if err != nil {
		t.Fatalf("second Setup() = %v", err)
	}
	if diff := cmp.Diff(first, again, protocmp.Transform()); diff != "" {
		t.Errorf("second Setup (-first +second):\n%s", diff)
	}
	if !again.GetLinkCreated() {
		t.Error("second Setup did not record the link as created")
	}
	if err := r.m.Free(t.Context(), again); err != nil {
		t.Fatalf("Free() = %v", err)
	}
	if r.link(t, "dummy3") != nil {
		t.Error("dummy3 still exists after Free")
	}
}

// TestRig_FreeLeavesReplacement: the link Setup created is gone and another
// link took its name; Free leaves that one alone.
func TestRig_FreeLeavesReplacement(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(t *testing.T, r *rig)
	}{
		{"foreign dummy", func(t *testing.T, r *rig) { r.addDummy(t, "dummy0") }},
		{"veth", func(t *testing.T, r *rig) {
			if err := r.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dummy0"}, PeerName: "peer0"}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			pd, err := r.setup(t, "dummy0")
			if err != nil {
				t.Fatal(err)
			}
			if err := r.h.LinkDel(r.link(t, "dummy0")); err != nil {
				t.Fatal(err)
			}
			tc.add(t, r)
			if err := r.m.Free(t.Context(), pd); err != nil {
				t.Fatalf("Free() = %v, want nil", err)
			}
			if r.link(t, "dummy0") == nil {
				t.Error("Free deleted a link it did not create")
			}
		})
	}
}

// TestRig_SetupUnknownDevice: a device beyond the count is refused before
// anything is created.
func TestRig_SetupUnknownDevice(t *testing.T) {
	r := newRig(t)
	if _, err := r.setup(t, "dummy4"); err == nil {
		t.Fatal("Setup(dummy4) with count 4 succeeded")
	}
	if r.link(t, "dummy4") != nil {
		t.Error("a refused Setup created dummy4")
	}
}

// newNetns creates a named network namespace under /run/netns, deleted at
// cleanup, and returns its path. The calling thread is switched into the
// new namespace by netns.NewNamed and back at once, locked meanwhile; if it
// cannot be switched back it stays locked, so the runtime retires it.
func newNetns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("ndtest-%d-%08x", os.Getpid(), rand.Uint32())
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	defer orig.Close()
	ns, nerr := netns.NewNamed(name)
	if err := netns.Set(orig); err != nil {
		t.Fatalf("switching back from netns %s: %v", name, err) // thread stays locked
	}
	runtime.UnlockOSThread()
	if nerr != nil {
		t.Fatalf("creating netns %s: %v", name, nerr)
	}
	ns.Close()
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("deleting netns %s: %v", name, err)
		}
	})
	return filepath.Join("/run/netns", name)
}

func dialPath(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}
