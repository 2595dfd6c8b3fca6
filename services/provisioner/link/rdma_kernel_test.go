//go:build kernelrig

package link_test

// RDMA devices and namespaces on a real kernel, inside the kernel rig:
// soft-RoCE (rdma_rxe) devices over veths, in the RDMA subsystem's shared
// and exclusive netns modes, found in sysfs (package rdma), their character
// devices real nodes in the guest's devtmpfs, moved (or not) with their
// netdev by the Mover.
//
// What soft-RoCE cannot show: an RDMA device actually changing namespace.
// The kernel moves one only when its driver can disassociate the user
// contexts open on it (ib_device_set_netns_put: no
// ops.disassociate_ucontext is EOPNOTSUPP); rdma_rxe has no such op (6.1
// and since), so in exclusive mode AttachRDMA must fail with
// ErrRDMANotMovable and leave the device in the host. The hardware drivers
// that can (mlx5, ...) do not exist in the guest.

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/services/provisioner/rdma"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// TestKernel_RDMA runs the shared mode first (the kernel's default), then
// the exclusive one: the mode can only change while no namespace but the
// initial one exists, so the two cannot run side by side.
func TestKernel_RDMA(t *testing.T) {
	kernelrig.Require(t)
	if _, err := os.Stat("/sys/module/rdma_rxe"); err != nil {
		t.Fatalf("soft-RoCE is not loaded in the rig (setup.sh and init.sh load rdma_rxe): %v", err)
	}
	m, err := link.NewMover(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if mode, err := m.RDMANetnsMode(); err != nil || mode != link.RDMAShared {
		t.Fatalf("RDMA netns mode at boot: %q, %v; want shared", mode, err)
	}
	t.Run("shared", func(t *testing.T) { rdmaShared(t, m) })
	t.Run("exclusive", func(t *testing.T) { rdmaExclusive(t, m) })
}

// rdmaShared: the pod sees the host's RDMA device without a move;
// AttachRDMA and DetachRDMA change nothing. Then the netdev moves, and
// soft-RoCE's device dies: rdma_rxe deletes its device when its netdev
// leaves the namespace (NETDEV_UNREGISTER), whichever the RDMA mode, so a
// pod never gets a working rxe device through its netdev (a hardware
// device belongs to its PCI function and stays).
func rdmaShared(t *testing.T, m *link.Mover) {
	ctx := t.Context()
	softRoCE(t, "rxs0", "rxes0")
	checkNodes(t, "rxs0", "rxes0")
	pod := netnstest.New(t)
	if err := m.AttachRDMA(ctx, "rxes0", pod); err != nil {
		t.Fatalf("AttachRDMA in shared mode: %v", err)
	}
	wantRDMA(t, "host", "", "rxes0", true)
	wantRDMA(t, "pod", pod, "rxes0", true) // shared: the pod sees it too
	if err := m.DetachRDMA(ctx, "rxes0", pod); err != nil {
		t.Fatalf("DetachRDMA in shared mode: %v", err)
	}
	wantRDMA(t, "host", "", "rxes0", true)

	orig := attachLink(t, m, "rxs0", pod)
	waitGone(t, "rxes0")
	if err := m.DetachRDMA(ctx, "rxes0", pod); err != nil {
		t.Errorf("DetachRDMA in shared mode of a device that died: %v", err)
	}
	if err := m.Detach(ctx, orig, pod, &devicev1.DeviceConfig{PodIfName: "net1"}); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits for the host to stop seeing the soft-RoCE device dev
// (rxe unregisters it from a work queue).
func waitGone(t *testing.T, dev string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat("/sys/class/infiniband/" + dev); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 5 s after its netdev left the namespace: rxe's behaviour changed (kernel %s)", dev, kernel())
		}
	}
}

// rdmaExclusive: the pod does not see the host's RDMA device; AttachRDMA
// refuses soft-RoCE's (ErrRDMANotMovable) with nothing moved, which is why
// the provisioner moves the RDMA device before the netdev; DetachRDMA
// of a device in the host, or from a netns that is gone, is success; a
// device that is nowhere is ErrRDMANotFound.
func rdmaExclusive(t *testing.T, m *link.Mover) {
	ctx := t.Context()
	setMode(t, link.RDMAExclusive)
	t.Cleanup(func() { setMode(t, link.RDMAShared) }) // after the netns below are gone
	softRoCE(t, "rxx0", "rxex0")
	checkNodes(t, "rxx0", "rxex0")
	pod := netnstest.New(t)
	wantRDMA(t, "pod", pod, "rxex0", false)

	err := m.AttachRDMA(ctx, "rxex0", pod)
	if !errors.Is(err, link.ErrRDMANotMovable) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("AttachRDMA of soft-RoCE in exclusive mode: %v; want ErrRDMANotMovable (EOPNOTSUPP)", err)
	}
	t.Logf("as expected: %v", err)
	wantRDMA(t, "host", "", "rxex0", true)
	wantRDMA(t, "pod", pod, "rxex0", false)

	if err := m.DetachRDMA(ctx, "rxex0", pod); err != nil {
		t.Errorf("DetachRDMA of a device in the host: %v", err)
	}
	if err := m.DetachRDMA(ctx, "rxex0", "/run/netns/ndtest-gone"); err != nil {
		t.Errorf("DetachRDMA from a netns that is gone: %v", err)
	}
	if err := m.AttachRDMA(ctx, "nosuch0", pod); !errors.Is(err, link.ErrRDMANotFound) {
		t.Errorf("AttachRDMA of a device that is nowhere: %v; want ErrRDMANotFound", err)
	}
}

// softRoCE makes a veth ifName (peer ifName+"p") in the host and the
// soft-RoCE device dev over it, both deleted at the end of the test.
func softRoCE(t *testing.T, ifName, dev string) {
	t.Helper()
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	netnstest.AddVeth(t, h, netnstest.Veth{Name: ifName, Peer: ifName + "p"})
	t.Cleanup(func() {
		if l, err := h.LinkByName(ifName + "p"); err == nil {
			h.LinkDel(l)
		}
	})
	if err := netlink.RdmaLinkAdd(dev, "rxe", ifName); err != nil {
		t.Fatalf("rdma link add %s type rxe netdev %s: %v (kernel %s)", dev, ifName, err, kernel())
	}
	t.Cleanup(func() { netlink.RdmaLinkDel(dev) }) // gone with its netdev, maybe
}

// checkNodes: package rdma finds dev as ifName's RDMA device in /sys, and
// its device nodes are character devices in the guest's /dev: uverbs,
// umad, issm and rdma_cm (the rig loads ib_uverbs, ib_umad and rdma_ucm).
func checkNodes(t *testing.T, ifName, dev string) {
	t.Helper()
	if got := rdma.ForNetdev("/sys", ifName); got != dev {
		t.Fatalf("rdma.ForNetdev(%s) = %q, want %q", ifName, got, dev)
	}
	var nodes []*devicev1.DeviceNode
	var err error
	// udev-less devtmpfs makes the nodes as the devices register.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		nodes, err = rdma.DeviceNodes("/sys", "/dev", dev)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 4 || time.Now().After(deadline) {
			break
		}
	}
	var kinds []string
	for _, n := range nodes {
		fi, err := os.Stat(n.GetHostPath())
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("%s: not a character device (%v, %v)", n.GetHostPath(), fi, err)
		}
		base := filepath.Base(n.GetPath())
		kinds = append(kinds, base[:len(base)-len(trailingDigits(base))])
		if n.GetPath() != "/dev/infiniband/"+base || n.GetHostPath() != "/dev/infiniband/"+base {
			t.Errorf("node %v: want /dev/infiniband/%s on both sides", n, base)
		}
	}
	if want := []string{"issm", "rdma_cm", "umad", "uverbs"}; !slices.Equal(kinds, want) {
		t.Errorf("%s's device nodes %v, want one of each of %v", dev, nodes, want)
	}
}

// trailingDigits returns the digits s ends with (uverbs12: 12).
func trailingDigits(s string) string {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[i:]
}

// attachLink moves the host link ifName into pod as net1 and returns what
// Detach restores.
func attachLink(t *testing.T, m *link.Mover, ifName, pod string) *devicev1.LinkSnapshot {
	t.Helper()
	orig, err := m.Snapshot(t.Context(), ifName)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Attach(t.Context(), ifName, orig, pod, &devicev1.DeviceConfig{PodIfName: "net1"}); err != nil {
		t.Fatal(err)
	}
	return orig
}

// wantRDMA checks whether the namespace at path ("" for the host) sees the
// RDMA device dev.
func wantRDMA(t *testing.T, where, path, dev string, want bool) {
	t.Helper()
	ns, err := netns.Get()
	if path != "" {
		ns, err = netns.GetFromPath(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_RDMA)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	devs, err := h.RdmaLinkList()
	if err != nil {
		t.Fatal(err)
	}
	got := slices.ContainsFunc(devs, func(l *netlink.RdmaLink) bool { return l.Attrs.Name == dev })
	if got != want {
		t.Errorf("%s sees %s: %v, want %v", where, dev, got, want)
	}
}

// setMode sets the RDMA netns mode, retrying while the kernel refuses
// (EBUSY) because a namespace of an earlier test is still being torn down.
func setMode(t *testing.T, mode string) {
	t.Helper()
	runtime.GC() // drop netns handles a finalizer would close
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = netlink.RdmaSystemSetNetnsMode(mode); !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	if err != nil {
		t.Fatalf("rdma system set netns %s: %v", mode, err)
	}
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return string(b)
}
