//go:build !kernelrig

// These tests need the host kernel (tcx) and iproute2; the kernel rig runs
// the dummy lifecycle with real dummy links (server_kernel_test.go).

package server

// The namespace moves of a pod lifecycle (Setup, Attach, Detach, Free)
// through the service's API, counted from the kernel's own link
// notifications: one into the pod and one out for a host interface, none
// for a dummy device, whose link is created in the pod. The host kernel has
// no dummy module, so the mover creates ifb links in its place (same shape:
// one end, no lower device); the dummy manager is the real one.

import (
	"context"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/link/linktest"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// lifecycle runs Setup, Attach, Attach again, Detach, Detach again and
// Free for dev with cfg, counting the moves out of the host and the pod
// namespaces after Attach and after Free.
func lifecycle(t *testing.T, srv *Server, dev *devicev1.Device, cfg *devicev1.DeviceConfig, hostPath, podPath string, inPod func(pd *devicev1.PreparedDevice)) (afterAttach, afterFree [2]int) {
	t.Helper()
	ctx := ctxFor(t)
	moves := linktest.CountMoves(t, hostPath, podPath)
	setup, err := srv.Setup(ctx, setupOf(dev, cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	for range 2 {
		if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	afterAttach = [2]int{moves.Out(hostPath), moves.Out(podPath)}
	if inPod != nil {
		inPod(pd)
	}
	for range 2 {
		if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podPath, Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	afterFree = [2]int{moves.Out(hostPath), moves.Out(podPath)}
	return afterAttach, afterFree
}

func TestMoves_HostInterface(t *testing.T) {
	w := newEBPFWorld(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: w.podMAC.String(), Mtu: 1400,
		Addresses: []string{"192.0.2.10/24"}, Routes: []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}}}
	attach, free := lifecycle(t, w.srv, w.device(t), cfg, w.hostPath, "/var/run/netns/"+w.pod, nil)
	if attach != [2]int{1, 0} {
		t.Errorf("after Attach: %d moves into the pod, %d out; want 1, 0", attach[0], attach[1])
	}
	if free != [2]int{1, 1} {
		t.Errorf("a host interface's lifecycle: %d moves in, %d out; want 1, 1", free[0], free[1])
	}
}

// dummyWorld is a provisioner with the dummy manager and eBPF, its host
// netns a throwaway one, its mover creating ifb links for dummies.
type dummyWorld struct {
	srv            *Server
	host, pod      string // netns names
	hostPath       string
	podPath        string
	programs       *ebpf.Programs
	hostH, podH    *netlink.Handle
	hostLinksStart []string
}

func newDummyWorld(t *testing.T) *dummyWorld {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	w := &dummyWorld{host: nodetest.Netns(t, "ndhost"), pod: nodetest.Netns(t, "ndpod")}
	w.hostPath, w.podPath = "/var/run/netns/"+w.host, "/var/run/netns/"+w.pod
	for _, ns := range []string{w.host, w.pod} {
		nodetest.IP(t, "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	if w.programs, err = ebpf.New(log, ebpftest.BPFFS(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.programs.Close)
	mover, err := link.NewMover(log, link.WithHostNetns(w.hostPath),
		link.WithVirtualKind(func(a netlink.LinkAttrs) netlink.Link { return &netlink.Ifb{LinkAttrs: a} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mover.Close() })
	w.srv = New(log, Factories{
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) {
			return dummy.New(log, c)
		},
	}, mover)
	w.srv.SetPrograms(w.programs, w.programs)
	t.Cleanup(w.srv.Wait) // the eBPF work Setup and Free leave running
	t.Cleanup(w.srv.Close)
	if _, err := w.srv.Configure(ctxFor(t), &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2}}}); err != nil {
		t.Fatal(err)
	}
	w.hostH, w.podH = netnstest.Handle(t, w.hostPath), netnstest.Handle(t, w.podPath)
	// A link called like a device in the host is not the device: it stays.
	if err := w.hostH.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "dummy0"}}); err != nil {
		t.Fatal(err)
	}
	w.hostLinksStart = netnstest.LinkNames(t, w.hostH)
	return w
}

func (w *dummyWorld) device(t *testing.T, name string) *devicev1.Device {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dev, ok := w.srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, name); ok {
			return dev
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never published", name)
		}
	}
}

// TestMoves_Dummy: a dummy device's whole lifecycle moves no link; its link
// is made in the pod with the MAC Setup chose, gets the software VLAN and
// spoof check there, and is deleted at Detach; the host, where a link of the
// device's name exists, is never touched.
func TestMoves_Dummy(t *testing.T) {
	w := newDummyWorld(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Mtu: 1400, Vlan: new(uint32(100)), SpoofChk: new(true),
		Addresses: []string{"192.0.2.10/24"}, Routes: []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}}}
	inPod := func(pd *devicev1.PreparedDevice) {
		l, err := w.podH.LinkByName("net1")
		if err != nil {
			t.Fatalf("net1 not in the pod: %v", err)
		}
		a := l.Attrs()
		if a.HardwareAddr.String() != pd.GetOriginalLink().GetMacAddress() || a.MTU != 1400 || a.Flags&net.FlagUp == 0 || a.Alias != link.CreatedAlias {
			t.Errorf("net1 in the pod: mac %s mtu %d flags %v alias %q; want mac %s (Setup's) mtu 1400, up, marked",
				a.HardwareAddr, a.MTU, a.Flags, a.Alias, pd.GetOriginalLink().GetMacAddress())
		}
		in, eg := ebpftest.TCX(t, w.pod, "net1")
		if len(in) != 1 || len(eg) != 1 {
			t.Fatalf("programs on net1: ingress %v egress %v, want netdra's one each", in, eg)
		}
		own, _ := net.ParseMAC(pd.GetOriginalLink().GetMacAddress())
		other, _ := net.ParseMAC("02:00:00:00:09:09")
		dropped, err := ebpftest.Send(w.pod, "net1", ebpftest.Frame{Src: own, Seq: 1}, ebpftest.Frame{Src: other, Seq: 2})
		if err != nil || dropped != 1 {
			t.Errorf("sending from the pod: %d dropped (want 1, the spoofed frame), %v", dropped, err)
		}
		c, err := w.srv.DeviceCounters(ctxFor(t), &provisionerv1.DeviceCountersRequest{Devices: []string{"dummy1"}})
		if err != nil {
			t.Fatal(err)
		}
		want := &provisionerv1.DeviceCounters{Device: "dummy1", TxPackets: 1, TxBytes: 60,
			Drops: []*provisionerv1.PolicyDrops{{Policy: "spoofChk", Packets: 1, Bytes: 60}, {Policy: "vlan"}}}
		if diff := cmp.Diff([]*provisionerv1.DeviceCounters{want}, c.GetDevices(), protocmp.Transform()); diff != "" {
			t.Errorf("counters (-want +got):\n%s", diff)
		}
	}
	attach, free := lifecycle(t, w.srv, w.device(t, "dummy1"), cfg, w.hostPath, w.podPath, inPod)
	if attach != [2]int{0, 0} || free != [2]int{0, 0} {
		t.Errorf("a dummy device's lifecycle: %v moves after Attach, %v after Free (out of host, out of pod); want none", attach, free)
	}
	if names := netnstest.LinkNames(t, w.podH); slices.Contains(names, "net1") {
		t.Errorf("net1 still in the pod after Detach: %v", names)
	}
	if diff := cmp.Diff(w.hostLinksStart, netnstest.LinkNames(t, w.hostH)); diff != "" {
		t.Errorf("host links (-before +after):\n%s", diff)
	}
	if devs, err := w.programs.Devices(); err != nil || len(devs) != 0 {
		t.Errorf("pinned after Free: %v %v", devs, err)
	}
}

// TestMoves_DummyFailures: a dummy device whose attach fails leaves no link
// in the pod, and moves nothing: programs refused (fail closed), a name
// held by another link, and the pod gone at Detach.
func TestMoves_DummyFailures(t *testing.T) {
	w := newDummyWorld(t)
	ctx := ctxFor(t)
	moves := linktest.CountMoves(t, w.hostPath, w.podPath)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(7))}
	setup, err := w.srv.Setup(ctx, setupOf(w.device(t, "dummy0"), cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()

	w.srv.SetPrograms(failingPrograms{w.programs}, w.programs)
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.podPath, Config: cfg})
	if status.Code(err) != codes.Internal {
		t.Fatalf("Attach with refused programs = %v, want Internal", err)
	}
	t.Log(err)
	if names := netnstest.LinkNames(t, w.podH); slices.Contains(names, "net1") {
		t.Errorf("net1 left in the pod after a failed Attach: %v", names)
	}
	w.srv.SetPrograms(w.programs, w.programs)

	// Another link holds the pod name: AlreadyExists, that link untouched.
	if err := w.podH.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "net1"}}); err != nil {
		t.Fatal(err)
	}
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.podPath, Config: cfg})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("Attach over another net1 = %v, want AlreadyExists", err)
	}
	if l, err := w.podH.LinkByName("net1"); err != nil || l.Attrs().Alias != "" {
		t.Errorf("the pod's own net1 after a refused Attach: %v %v", l, err)
	}
	if err := w.podH.LinkDel(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "net1"}}); err != nil {
		t.Fatal(err)
	}

	// Attached, then the pod's netns goes: Detach is success.
	if _, err := w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.podPath, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if got := [2]int{moves.Out(w.hostPath), moves.Out(w.podPath)}; got != [2]int{0, 0} {
		t.Errorf("moves (out of host, out of pod): %v, want none", got)
	}
	nodetest.IP(t, "netns", "del", w.pod)
	if _, err := os.Stat(w.podPath); !os.IsNotExist(err) {
		t.Fatalf("netns %s still there: %v", w.podPath, err)
	}
	if _, err := w.srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.podPath, Config: cfg}); err != nil {
		t.Fatalf("Detach after the netns went = %v, want nil", err)
	}
	if _, err := w.srv.Free(context.WithoutCancel(ctx), &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w.hostLinksStart, netnstest.LinkNames(t, w.hostH)); diff != "" {
		t.Errorf("host links (-before +after):\n%s", diff)
	}
	if out := moves.Out(w.hostPath); out != 0 {
		t.Errorf("%d moves out of the host, want none", out)
	}
}
