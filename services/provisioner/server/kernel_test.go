//go:build kernelrig

package server

// The whole provisioner on a real kernel, inside the kernel rig: the dummy
// manager and the link mover, driven through the service's API.

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/kernelrig"
)

// newPodNetns creates a named netns for a pod and returns its path.
func newPodNetns(t *testing.T, name string) string {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	pod, err := netns.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	pod.Close()
	if err := netns.Set(host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	return "/var/run/netns/" + name
}

// TestKernel_DummyEndToEnd: Configure, WatchDevices' inventory, Setup
// (creates the link), Attach into a pod netns with name, MAC, MTU,
// addresses and a route, Detach (back as it was), Free (deleted). The guest
// loads the dummy module with its default numdummies=1, so dummy1 exists
// already and would be adopted, not created: the test uses dummy1.
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
	var dev *devicev1.Device
	for deadline := time.Now().Add(10 * time.Second); dev == nil; time.Sleep(10 * time.Millisecond) {
		dev, _ = srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, "dummy1")
		if time.Now().After(deadline) {
			t.Fatal("dummy1 never published")
		}
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: "02:00:00:00:00:42", Mtu: 1400,
		Addresses: []string{"192.168.50.2/24", "fd00:50::2/64"},
		Routes:    []*devicev1.Route{{Destination: "192.168.60.0/24", Gateway: "192.168.50.1"}}}

	setup, err := srv.Setup(ctx, &provisionerv1.SetupRequest{Device: dev, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	if _, err := netlink.LinkByName("dummy1"); err != nil {
		t.Fatalf("Setup did not create dummy1: %v", err)
	}

	podNS := newPodNetns(t, "pod-e2e")
	if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podNS, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName("dummy1"); err == nil {
		t.Error("dummy1 is still in the host after Attach")
	}
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("net1")
	if err != nil {
		t.Fatalf("net1 not in the pod: %v", err)
	}
	if a := l.Attrs(); a.HardwareAddr.String() != "02:00:00:00:00:42" || a.MTU != 1400 || a.Flags&net.FlagUp == 0 {
		t.Errorf("net1 in the pod: mac %s mtu %d flags %v", a.HardwareAddr, a.MTU, a.Flags)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, a := range addrs {
		found[a.IPNet.String()] = true
	}
	for _, want := range []string{"192.168.50.2/24", "fd00:50::2/64"} {
		if !found[want] {
			t.Errorf("net1 lacks %s: %v", want, found)
		}
	}
	_, dst, _ := net.ParseCIDR("192.168.60.0/24")
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
	if err != nil || len(routes) != 1 || routes[0].Gw.String() != "192.168.50.1" {
		t.Errorf("route in the pod: %v %v", routes, err)
	}

	if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podNS, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	back, err := netlink.LinkByName("dummy1")
	if err != nil {
		t.Fatalf("dummy1 not back in the host: %v", err)
	}
	if orig := pd.GetOriginalLink(); back.Attrs().HardwareAddr.String() != orig.GetMacAddress() || uint32(back.Attrs().MTU) != orig.GetMtu() {
		t.Errorf("dummy1 back with mac %s mtu %d, want %s %d", back.Attrs().HardwareAddr, back.Attrs().MTU, orig.GetMacAddress(), orig.GetMtu())
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName("dummy1"); err == nil {
		t.Error("Free left dummy1 behind")
	}
	// Free again is fine.
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
}
