//go:build kernelrig

package server

// The whole provisioner on a real kernel, inside the kernel rig: the dummy
// manager and the link mover, driven through the service's API.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/link/linktest"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// TestKernel_DummyEndToEnd: Configure, WatchDevices' inventory, Setup
// (nothing made in the host), Attach (the dummy link created in the pod
// netns with name, MAC, MTU, addresses and a route), Detach (deleted
// there), Free; no link moves at any step, as the kernel's own link
// notifications show. The guest loads the dummy module with its default
// numdummies=1, so the host has a dummy0 of its own, which must stay as it
// is: the test uses both devices.
func TestKernel_DummyEndToEnd(t *testing.T) {
	kernelrig.Require(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	mover, err := link.NewMover(log)
	if err != nil {
		t.Fatal(err)
	}
	defer mover.Close()
	srv := New(log, Factories{
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) { return dummy.New(log, c) },
	}, mover)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := srv.Configure(ctx, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dummy0", "dummy1"} {
		t.Run(name, func(t *testing.T) { dummyEndToEnd(t, ctx, srv, name) })
	}
}

func dummyEndToEnd(t *testing.T, ctx context.Context, srv *Server, name string) {
	var dev *devicev1.Device
	for deadline := time.Now().Add(10 * time.Second); dev == nil; time.Sleep(10 * time.Millisecond) {
		dev, _ = srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, name)
		if time.Now().After(deadline) {
			t.Fatalf("%s never published", name)
		}
	}
	hostBefore := hostLinks(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: "02:00:00:00:00:42", Mtu: 1400,
		Addresses: []string{"192.168.50.2/24", "fd00:50::2/64"},
		Routes:    []*devicev1.Route{{Destination: "192.168.60.0/24", Gateway: "192.168.50.1"}}}

	setup, err := srv.Setup(ctx, setupOf(dev, cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	if diff := cmp.Diff(hostBefore, hostLinks(t)); diff != "" {
		t.Errorf("host links after Setup (-before +after):\n%s", diff)
	}

	podNS := netnstest.New(t)
	moves := linktest.CountMoves(t, "/proc/self/ns/net", podNS)
	for range 2 {
		if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podNS, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(hostBefore, hostLinks(t)); diff != "" {
		t.Errorf("host links after Attach (-before +after):\n%s", diff)
	}
	h := netnstest.Handle(t, podNS)
	l, err := h.LinkByName("net1")
	if err != nil {
		t.Fatalf("net1 not in the pod: %v", err)
	}
	if a := l.Attrs(); l.Type() != "dummy" || a.HardwareAddr.String() != "02:00:00:00:00:42" || a.MTU != 1400 || a.Flags&net.FlagUp == 0 {
		t.Errorf("net1 in the pod: a %s link, mac %s mtu %d flags %v", l.Type(), a.HardwareAddr, a.MTU, a.Flags)
	}
	checkIPConfig(t, h, l, []string{"192.168.50.2/24", "fd00:50::2/64"}, "192.168.60.0/24", "192.168.50.1")

	for range 2 {
		if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podNS, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.LinkByName("net1"); err == nil {
		t.Error("net1 still in the pod after Detach")
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hostBefore, hostLinks(t)); diff != "" {
		t.Errorf("host links after Free (-before +after):\n%s", diff)
	}
	if out, in := moves.Out("/proc/self/ns/net"), moves.Out(podNS); out != 0 || in != 0 {
		t.Errorf("moves: %d out of the host, %d out of the pod; want none", out, in)
	}
	// Free again is fine.
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
}

// hostLinks lists the names and kinds of the guest's host links, and the
// dummies' MACs, MTUs and aliases: what must not change.
func hostLinks(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		out = append(out, fmt.Sprintf("%s %s %s %d %q", a.Name, l.Type(), a.HardwareAddr, a.MTU, a.Alias))
	}
	return out
}

// checkIPConfig checks that the link l in h's namespace has the addresses
// want and the one IPv4 route to dst via gw.
func checkIPConfig(t *testing.T, h *netlink.Handle, l netlink.Link, want []string, dst, gw string) {
	t.Helper()
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, a := range addrs {
		found[a.IPNet.String()] = true
	}
	for _, w := range want {
		if !found[w] {
			t.Errorf("%s lacks %s: %v", l.Attrs().Name, w, found)
		}
	}
	_, prefix, _ := net.ParseCIDR(dst)
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: prefix}, netlink.RT_FILTER_DST)
	if err != nil || len(routes) != 1 || routes[0].Gw.String() != gw {
		t.Errorf("route to %s in the pod: %v %v", dst, routes, err)
	}
}
