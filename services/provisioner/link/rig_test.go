package link

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// The privileged tests never touch the real host namespace: a rig is two
// throwaway named namespaces, a "host" one the Mover is told is the host
// (WithHostNetns) and a "pod" one, with veth pairs created in the host one.

// needRoot skips tb unless it runs as root.
func needRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces and veth links (CI runs it as root)")
	}
}

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
	needRoot(tb)
	r := &rig{tb: tb, hostPath: newNetns(tb), podPath: newNetns(tb)}
	r.host = dialPath(tb, r.hostPath)
	r.pod = dialPath(tb, r.podPath)
	m, err := NewMover(testLogger(tb), WithHostNetns(r.hostPath))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	r.mover = m
	return r
}

// newNetns creates a named network namespace under /run/netns, deleted at
// cleanup, and returns its path. The calling thread is switched into the
// new namespace by netns.NewNamed and back at once, locked meanwhile; if it
// cannot be switched back it stays locked, so the runtime retires it.
func newNetns(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("ndtest-%d-%08x", os.Getpid(), rand.Uint32())
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("current netns: %v", err)
	}
	defer orig.Close()
	ns, nerr := netns.NewNamed(name)
	if err := netns.Set(orig); err != nil {
		tb.Fatalf("switching back from netns %s: %v", name, err) // thread stays locked
	}
	runtime.UnlockOSThread()
	if nerr != nil {
		tb.Fatalf("creating netns %s: %v", name, nerr)
	}
	ns.Close()
	tb.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			tb.Errorf("deleting netns %s: %v", name, err)
		}
	})
	return filepath.Join("/run/netns", name)
}

func dialPath(tb testing.TB, path string) *netlink.Handle {
	tb.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h
}

// addVeth creates a veth pair name/peer in h with name's MAC, MTU and up
// state as given; the peer is up, so name has carrier when up.
func addVeth(tb testing.TB, h *netlink.Handle, name, peer, mac string, mtu int, up bool) {
	tb.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil {
		tb.Fatal(err)
	}
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: hw, MTU: mtu}, PeerName: peer}
	if err := h.LinkAdd(v); err != nil {
		tb.Fatalf("adding veth %s/%s: %v", name, peer, err)
	}
	for _, n := range []string{name, peer} {
		if n == name && !up {
			continue
		}
		l, err := h.LinkByName(n)
		if err != nil {
			tb.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			tb.Fatal(err)
		}
	}
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
	if isNotFound(err) {
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

// retryDump retries a netlink dump that the kernel interrupted (the table
// changed under it); netlink v1.3.1 returns partial results with
// ErrDumpInterrupted.
func retryDump[T any](tb testing.TB, dump func() ([]T, error)) []T {
	tb.Helper()
	for i := 0; ; i++ {
		v, err := dump()
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 10 {
			continue
		}
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
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
