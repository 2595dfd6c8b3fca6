//go:build kernelrig

package server

// The provisioner with eBPF on the kernel rig's 6.1 kernel, which has no
// tcx: a dummy device that only gets counters is attached without them (a
// warning), one whose claim asks for software VLAN is refused and its link,
// created in the pod, deleted again.

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

func TestKernel_DummyWithoutTCX(t *testing.T) {
	kernelrig.Require(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	mover, err := link.NewMover(log)
	if err != nil {
		t.Fatal(err)
	}
	defer mover.Close()
	progs, err := ebpf.New(log, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(progs.Close)
	srv := New(log, Factories{
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) { return dummy.New(log, c) },
	}, mover)
	srv.SetPrograms(progs, progs)
	t.Cleanup(srv.Wait) // the eBPF work Setup and Free leave running
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.Configure(ctx, &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 4}}}); err != nil {
		t.Fatal(err)
	}
	var dev2, dev3 *devicev1.Device
	for deadline := time.Now().Add(10 * time.Second); dev2 == nil || dev3 == nil; time.Sleep(10 * time.Millisecond) {
		dev2, _ = srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, "dummy2")
		dev3, _ = srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, "dummy3")
		if time.Now().After(deadline) {
			t.Fatal("dummy2 and dummy3 never published")
		}
	}

	// Counters only: attached without them.
	podNS := netnstest.New(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net2"}
	setup, err := srv.Setup(ctx, setupOf(dev2, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: podNS, Config: cfg}); err != nil {
		t.Fatalf("Attach of a counters-only device without tcx: %v", err)
	}
	if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: podNS, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice()}); err != nil {
		t.Fatal(err)
	}

	// Software VLAN: refused, and the link created in the pod deleted again
	// (never in the host).
	cfg = &devicev1.DeviceConfig{PodIfName: "net3", Vlan: new(uint32(10))}
	setup, err = srv.Setup(ctx, setupOf(dev3, cfg))
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: setup.GetPreparedDevice(), NetnsPath: podNS, Config: cfg})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Attach with software VLAN without tcx = %v, want FailedPrecondition", err)
	}
	t.Log(err)
	if _, err := netlink.LinkByName("dummy3"); err == nil {
		t.Error("dummy3 in the host")
	}
	if out := netnstest.LinkNames(t, netnstest.Handle(t, podNS)); slices.Contains(out, "net3") {
		t.Errorf("net3 left in the pod: %v", out)
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice()}); err != nil {
		t.Fatal(err)
	}
	if devs, err := progs.Devices(); err != nil || len(devs) != 0 {
		t.Errorf("pinned after Free: %v %v", devs, err)
	}
}
