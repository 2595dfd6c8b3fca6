package link

import (
	"log/slog"
	"net"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// The privileged tests never touch the real host namespace: a rig is two
// throwaway named namespaces, a "host" one the Mover is told is the host
// (WithHostNetns) and a "pod" one, with veth pairs created in the host one.

// rig is a test "host" and "pod" namespace with a Mover whose host is the
// test host.
type rig struct {
	tb       testing.TB
	hostPath string
	podPath  string
	host     *netlink.Handle
	pod      *netlink.Handle
	mover    *Mover
}

func newRig(tb testing.TB) *rig {
	tb.Helper()
	testenv.RequireRoot(tb, "creates network namespaces and moves links between them")
	r := &rig{tb: tb, hostPath: netnstest.New(tb), podPath: netnstest.New(tb)}
	r.host = netnstest.Handle(tb, r.hostPath)
	r.pod = netnstest.Handle(tb, r.podPath)
	m, err := NewMover(testLogger(tb), WithHostNetns(r.hostPath))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	r.mover = m
	return r
}

// rigWithDevice is a rig with the host veth ndv0 (hostMAC, MTU 1500, up),
// its view and its snapshot (what a prepare records of a device's link).
func rigWithDevice(t *testing.T) (*rig, *view, *devicev1.LinkSnapshot) {
	t.Helper()
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
	orig, err := r.mover.Snapshot(t.Context(), "ndv0")
	if err != nil {
		t.Fatal(err)
	}
	return r, viewOf(t, r.host, "ndv0"), orig
}

// view is what a test checks of a link: identity, global addresses and the
// routes netdra added (proto static, main table).
type view struct {
	Name      string
	MAC       string
	MTU       int
	Up        bool
	Addresses []string
	Routes    []string
}

// viewOf reads the link name in h; nil if there is none.
func viewOf(tb testing.TB, h *netlink.Handle, name string) *view {
	tb.Helper()
	l, err := h.LinkByName(name)
	if netlinkns.IsNotFound(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	a := l.Attrs()
	v := &view{Name: a.Name, MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
	addrs := retryDump(tb, func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
	for _, ad := range addrs {
		if !ad.IP.IsLinkLocalUnicast() {
			v.Addresses = append(v.Addresses, ad.IPNet.String())
		}
	}
	routes := retryDump(tb, func() ([]netlink.Route, error) { return h.RouteList(l, netlink.FAMILY_ALL) })
	for _, rt := range routes {
		if rt.Protocol != unix.RTPROT_STATIC {
			continue
		}
		s := rt.Dst.String()
		if rt.Gw != nil {
			s += " via " + rt.Gw.String()
		}
		v.Routes = append(v.Routes, s)
	}
	slices.Sort(v.Addresses)
	slices.Sort(v.Routes)
	return v
}

// retryDump is netlinkns.RetryDump failing the test on an error.
func retryDump[T any](tb testing.TB, dump func() ([]T, error)) []T {
	tb.Helper()
	v, err := netlinkns.RetryDump(dump)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// snapshotOf reads name in h as a LinkSnapshot; nil if there is none.
func snapshotOf(tb testing.TB, h *netlink.Handle, name string) *devicev1.LinkSnapshot {
	tb.Helper()
	v := viewOf(tb, h, name)
	if v == nil {
		return nil
	}
	return &devicev1.LinkSnapshot{Name: v.Name, MacAddress: v.MAC, Mtu: uint32(v.MTU), Up: v.Up}
}

// testLogger logs through tb; benchmarks discard.
func testLogger(tb testing.TB) *slog.Logger {
	if _, ok := tb.(*testing.B); ok {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// kernelRelease is the running kernel's release, for a failure's message.
func kernelRelease(t *testing.T) string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

func u32p(v uint32) *uint32 { return &v }
