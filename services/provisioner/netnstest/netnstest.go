// Package netnstest gives the provisioner's privileged tests throwaway
// network namespaces with links in them: a named namespace deleted at the
// end of the test (New), a rtnetlink socket inside one (Handle), veth pairs
// (AddVeth), the names of the links a namespace holds (LinkNames), and a
// function run inside one (Do), for sockets that must be made there. The
// tests never touch the real host namespace: they tell the code under test
// that one of these namespaces is the host's. Everything here needs root:
// callers call testenv.RequireRoot first or run in the kernel rig.
package netnstest

import (
	"errors"
	"fmt"
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
)

// New creates a named network namespace under /run/netns, deleted at the
// end of the test, and returns its path. The calling thread is switched
// into the new namespace by netns.NewNamed and back at once, locked
// meanwhile; if it cannot be switched back it stays locked, so the runtime
// retires it.
func New(tb testing.TB) string {
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

// Handle opens a rtnetlink socket inside the network namespace at path,
// closed at the end of the test. Only NETLINK_ROUTE: without a family list
// the library also opens XFRM and NETFILTER sockets, which fail here.
func Handle(tb testing.TB, path string) *netlink.Handle {
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

// Veth is a veth pair for AddVeth: Name, with MAC and MTU when they are set
// (else the kernel's), up unless Down, and its Peer, always up, so that
// Name has carrier when up.
type Veth struct {
	Name, Peer string
	MAC        string
	MTU        int
	Down       bool
}

// AddVeth creates the veth pair v in h.
func AddVeth(tb testing.TB, h *netlink.Handle, v Veth) {
	tb.Helper()
	attrs := netlink.LinkAttrs{Name: v.Name, MTU: v.MTU}
	if v.MAC != "" {
		hw, err := net.ParseMAC(v.MAC)
		if err != nil {
			tb.Fatal(err)
		}
		attrs.HardwareAddr = hw
	}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: v.Peer}); err != nil {
		tb.Fatalf("adding veth %s/%s: %v", v.Name, v.Peer, err)
	}
	for _, n := range []string{v.Name, v.Peer} {
		if n == v.Name && v.Down {
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

// LinkNames returns the names of the links in h's namespace, sorted.
func LinkNames(tb testing.TB, h *netlink.Handle) []string {
	tb.Helper()
	links, err := h.LinkList()
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return names
}

// Do runs f on a locked thread switched into the network namespace at
// path, and switches the thread back before it returns. A socket f opens
// stays in that namespace. If the thread cannot be switched back Do
// panics rather than let it serve other goroutines in the wrong
// namespace.
func Do(tb testing.TB, path string, f func()) {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("switching back from netns %s: %v", path, err))
		}
	}()
	f()
}
