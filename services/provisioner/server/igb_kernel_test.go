//go:build kernelrig

package server

// The whole provisioner on a real SR-IOV NIC, inside the kernel rig's igb
// machine (kernelrig.machine): QEMU's emulated Intel 82576 with the
// kernel's igb and igbvf drivers. The sr-iov manager creates the VFs from
// the NodeConfig's count, and a real VF netdev goes through Setup, Attach,
// Detach and Free through the service's API; a VF destroyed under its pod
// (sriov_numvfs lowered) is reported lost and never handed out again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// igbPF returns the PCI address and netdev of the igb machine's first
// emulated 82576 PF (8086:10c9).
func igbPF(t *testing.T) (addr, netdev string) {
	t.Helper()
	entries, err := os.ReadDir("/sys/bus/pci/devices")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		dir := filepath.Join("/sys/bus/pci/devices", e.Name())
		v, _ := os.ReadFile(filepath.Join(dir, "vendor"))
		d, _ := os.ReadFile(filepath.Join(dir, "device"))
		if string(v) != "0x8086\n" || string(d) != "0x10c9\n" {
			continue
		}
		nets, err := os.ReadDir(filepath.Join(dir, "net"))
		if err != nil || len(nets) != 1 {
			t.Fatalf("82576 PF %s: netdevs %v, %v", e.Name(), nets, err)
		}
		return e.Name(), nets[0].Name()
	}
	t.Fatal("no emulated 82576 PF: does the package have kernelrig.machine?")
	return "", ""
}

// vfSettings is what the PF reports of VF vf's settings.
func vfSettings(t *testing.T, pf string, vf int) string {
	t.Helper()
	l, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	if vf >= len(l.Attrs().Vfs) {
		t.Fatalf("%s has %d VFs, no VF %d", pf, len(l.Attrs().Vfs), vf)
	}
	v := l.Attrs().Vfs[vf]
	return fmt.Sprintf("mac %s vlan %d qos %d spoofchk %t trust %d max_tx_rate %d", v.Mac, v.Vlan, v.Qos, v.Spoofchk, v.Trust, v.MaxTxRate)
}

// hostLink is a host link's identity: name, MAC, MTU, admin state.
func hostLink(t *testing.T, name string) string {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("host link %s: %v", name, err)
	}
	a := l.Attrs()
	return fmt.Sprintf("%s %s mtu %d up %t", a.Name, a.HardwareAddr, a.MTU, a.Flags&net.FlagUp != 0)
}

// igbServer is a provisioner with the sr-iov manager on the guest's
// sysfs (an hour's resync: only link events rescan), and netdra's eBPF
// programs when programs is set; closed at the end of the test.
func igbServer(t *testing.T, programs bool) *Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	mover, err := link.NewMover(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mover.Close() })
	var progs *ebpf.Programs
	if programs {
		if progs, err = ebpf.New(log, ebpftest.BPFFS(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(progs.Close)
	}
	srv := New(log, Factories{
		Sriov: func(_ string, c *provisionerv1.SriovConfig, prepared PreparedVFs, report func([]string)) (manager.Manager, error) {
			return sriov.New(log, "/sys", c, sriov.WithResync(time.Hour), sriov.WithPrepared(prepared), sriov.WithReport(report))
		},
	}, mover)
	if progs != nil {
		srv.SetPrograms(progs, progs)
	}
	t.Cleanup(srv.Wait) // the eBPF work Setup and Free leave running
	t.Cleanup(srv.Close)
	return srv
}

// waitUntil polls cond until it holds, failing the test when it does not
// within d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not after %v: %s", d, what)
		}
	}
}

// statusData is pd as dra keeps it in the claim's status (protojson).
func statusData(t *testing.T, pd *devicev1.PreparedDevice) []byte {
	t.Helper()
	b, err := protojson.Marshal(pd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// configure asks the server for vfCount VFs on pf, with no VF prepared
// for a claim as far as dra knows.
func configure(t *testing.T, ctx context.Context, srv *Server, pf string, vfCount uint32) {
	t.Helper()
	if _, err := srv.Configure(ctx, &provisionerv1.ConfigureRequest{
		Managers: &provisionerv1.ManagerConfigs{Sriov: &provisionerv1.SriovConfig{Enabled: true,
			Ifaces: []*provisionerv1.SriovInterface{{IfName: pf, VfCount: vfCount}}}},
		PreparedVfs: &provisionerv1.PreparedVfs{}}); err != nil {
		t.Fatal(err)
	}
}

// publishedVFs waits until the sr-iov inventory holds n VFs of pf, each
// with a netdev, and returns them by VF index.
func publishedVFs(t *testing.T, srv *Server, pf string, n int) []*devicev1.Device {
	t.Helper()
	var devs []*devicev1.Device
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d VFs of %s published with netdevs", n, pf), func() bool {
		srv.inv.mu.Lock()
		defer srv.inv.mu.Unlock()
		devs = slices.DeleteFunc(slices.Clone(srv.inv.devices[devicev1.DeviceManager_DEVICE_MANAGER_SRIOV]),
			func(d *devicev1.Device) bool { return d.GetKernelIfName() == "" || d.GetPfName() != pf })
		return len(devs) == n
	})
	slices.SortFunc(devs, func(a, b *devicev1.Device) int { return int(a.GetVfIndex() - b.GetVfIndex()) })
	return devs
}

// TestIGB_VFEndToEnd: Configure with a vfCount creates the VFs on the real
// PF and publishes them; a VF netdev gets its VF settings through the PF
// at Setup, moves into the pod at Attach with the claim's name, MAC, MTU,
// addresses and route, comes back at Detach and is, after Free, the host
// link it was (name, MAC, MTU, admin state) with the VF settings it had,
// read back from the kernel. Then sriov_numvfs goes to 0 under an attached
// VF: Detach reports it lost, Free has nothing left to restore, and the
// device is no longer offered.
func TestIGB_VFEndToEnd(t *testing.T) {
	kernelrig.Require(t)
	addr, pf := igbPF(t)
	srv := igbServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pfLink, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(pfLink); err != nil {
		t.Fatal(err)
	}
	configure(t, ctx, srv, pf, 2)
	devs := publishedVFs(t, srv, pf, 2)
	// The driver takes a tx rate only at link speed 1000: with carrier,
	// which it loses for a moment when the VFs are created.
	waitUntil(t, 30*time.Second, pf+" operationally up", func() bool {
		l, err := netlink.LinkByName(pf)
		return err == nil && l.Attrs().OperState == netlink.OperUp
	})
	waitUntil(t, 30*time.Second, pf+" at link speed 1000", func() bool {
		speed, _ := os.ReadFile(filepath.Join("/sys/class/net", pf, "speed"))
		return string(speed) == "1000\n"
	})
	numvfs, _ := os.ReadFile(filepath.Join("/sys/bus/pci/devices", addr, "sriov_numvfs"))
	t.Logf("PF %s (%s): sriov_numvfs %s; VFs %s and %s", pf, addr, numvfs, devs[0].GetKernelIfName(), devs[1].GetKernelIfName())

	dev := devs[0]
	hostBefore, vfBefore := hostLink(t, dev.GetKernelIfName()), vfSettings(t, pf, 0)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: "02:4e:44:00:01:01", Mtu: 1400,
		Vlan: new(uint32(10)), VlanQos: new(uint32(2)), SpoofChk: new(true), Trust: new(true), MaxTxRate: new(uint32(100)),
		Addresses: []string{"192.168.70.2/24", "fd00:70::2/64"},
		Routes:    []*devicev1.Route{{Destination: "192.168.71.0/24", Gateway: "192.168.70.1"}}}
	setup, err := srv.Setup(ctx, setupOf(dev, cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	// What a restarted dra hands back from the claim's status.
	if _, err := srv.Restore(ctx, &provisionerv1.RestoreRequest{Data: statusData(t, pd)}); err != nil {
		t.Errorf("Restore of the VF as Setup recorded it: %v", err)
	}
	if got, want := vfSettings(t, pf, 0), "mac 02:4e:44:00:01:01 vlan 10 qos 2 spoofchk true trust 1 max_tx_rate 100"; got != want {
		t.Errorf("VF 0 after Setup: %s, want %s", got, want)
	}

	podNS := netnstest.New(t)
	if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podNS, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	h := netnstest.Handle(t, podNS)
	l, err := h.LinkByName("net1")
	if err != nil {
		t.Fatalf("net1 not in the pod: %v (pod links %v)", err, netnstest.LinkNames(t, h))
	}
	if a := l.Attrs(); a.HardwareAddr.String() != "02:4e:44:00:01:01" || a.MTU != 1400 || a.Flags&net.FlagUp == 0 {
		t.Errorf("net1 in the pod: mac %s mtu %d flags %v", a.HardwareAddr, a.MTU, a.Flags)
	}
	if drv, _ := os.Readlink(filepath.Join("/sys/bus/pci/devices", dev.GetPciAddress(), "driver")); filepath.Base(drv) != "igbvf" {
		t.Errorf("the VF's driver is %q, want igbvf", drv)
	}
	checkIPConfig(t, h, l, []string{"192.168.70.2/24", "fd00:70::2/64"}, "192.168.71.0/24", "192.168.70.1")

	if _, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podNS, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.LinkByName("net1"); err == nil {
		t.Error("net1 still in the pod after Detach")
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(hostBefore, hostLink(t, dev.GetKernelIfName())); diff != "" {
		t.Errorf("the VF's host link after Free (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(vfBefore, vfSettings(t, pf, 0)); diff != "" {
		t.Errorf("VF 0's settings after Free (-before +after):\n%s", diff)
	}

	// A VF whose claim sets no VF setting: the PF is not asked, and the
	// prepared device has no original_vf; a restarted dra restores it too.
	// Free's restore of VF 0's settings resets the VF, and igbvf
	// registers its netdev again: the inventory lists the VF without a
	// netdev for a moment, and a Setup then prepares it with none.
	dev = publishedVFs(t, srv, pf, 2)[0]
	plain := &devicev1.DeviceConfig{PodIfName: "net1"}
	if setup, err = srv.Setup(ctx, setupOf(dev, plain)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Restore(ctx, &provisionerv1.RestoreRequest{Data: statusData(t, setup.GetPreparedDevice())}); err != nil {
		t.Errorf("Restore of a VF set up without VF settings: %v", err)
	}
	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice()}); err != nil {
		t.Fatal(err)
	}

	// sriov_numvfs to 0 under an attached VF: the kernel destroys its netdev
	// in the pod.
	dev = devs[1]
	cfg = &devicev1.DeviceConfig{PodIfName: "net2", Vlan: new(uint32(20))}
	if setup, err = srv.Setup(ctx, setupOf(dev, cfg)); err != nil {
		t.Fatal(err)
	}
	pd = setup.GetPreparedDevice()
	podNS2 := netnstest.New(t)
	if _, err := srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: podNS2, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("/sys/bus/pci/devices", addr, "sriov_numvfs"), []byte(strconv.Itoa(0)), 0); err != nil {
		t.Fatal(err)
	}
	h2 := netnstest.Handle(t, podNS2)
	waitUntil(t, 10*time.Second, "net2 gone from the pod after sriov_numvfs 0", func() bool {
		_, err := h2.LinkByName("net2")
		return err != nil
	})
	det, err := srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: podNS2, Config: cfg})
	if err != nil {
		t.Fatalf("Detach of a VF destroyed in its pod: %v", err)
	}
	if !det.GetDeviceLost() {
		t.Error("Detach of a VF destroyed in its pod: device_lost false")
	}
	free, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd})
	if err != nil {
		t.Fatalf("Free of a destroyed VF: %v", err)
	}
	t.Logf("Detach: lost %t; Free: lost %t", det.GetDeviceLost(), free.GetDeviceLost())
	waitUntil(t, 30*time.Second, "the destroyed VF gone from the inventory", func() bool {
		_, ok := srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, dev.GetName())
		return !ok
	})
	_, err = srv.Setup(ctx, setupOf(dev, cfg))
	if status.Code(err) != codes.NotFound {
		t.Errorf("Setup of the destroyed VF = %v, want NotFound", err)
	}
}

// TestIGB_VFCountChange: a vfCount changed in the NodeConfig while a VF of
// the PF is allocated never pulls VFs from under a pod: the real PF keeps
// its count (the VF netdevs are the same links), the wait is reported, and
// the new count is applied once the VF is freed; a count the 82576 cannot
// take (8) is refused naming the field, the VFs left as they are.
func TestIGB_VFCountChange(t *testing.T) {
	kernelrig.Require(t)
	addr, pf := igbPF(t)
	srv := igbServer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	numvfs := func() string {
		b, _ := os.ReadFile(filepath.Join("/sys/bus/pci/devices", addr, "sriov_numvfs"))
		return string(b)
	}

	configure(t, ctx, srv, pf, 2)
	devs := publishedVFs(t, srv, pf, 2)
	netdevs := []string{devs[0].GetKernelIfName(), devs[1].GetKernelIfName()}
	before := map[string]int{}
	for _, n := range netdevs {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		before[n] = l.Attrs().Index
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(30))}
	setup, err := srv.Setup(ctx, setupOf(devs[0], cfg))
	if err != nil {
		t.Fatal(err)
	}

	configure(t, ctx, srv, pf, 4)
	var warn []string
	waitUntil(t, 30*time.Second, "a warning that the new count waits", func() bool {
		warn = srv.inv.warnings(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV)
		return len(warn) != 0
	})
	t.Logf("while VF 0 is allocated: sriov_numvfs %q, warnings %q", numvfs(), warn)
	if got := numvfs(); got != "2\n" {
		t.Errorf("sriov_numvfs %q with a VF allocated, want 2", got)
	}
	for n, idx := range before {
		if l, err := netlink.LinkByName(n); err != nil || l.Attrs().Index != idx {
			t.Errorf("VF netdev %s re-created or gone while a VF of the PF is allocated: %v", n, err)
		}
	}

	if _, err := srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice()}); err != nil {
		t.Fatal(err)
	}
	publishedVFs(t, srv, pf, 4)
	if got := numvfs(); got != "4\n" {
		t.Errorf("sriov_numvfs %q after the Free, want 4", got)
	}
	// The link events of the new VFs can publish them before the
	// manager's pass that re-created them ends and drops its warning.
	waitUntil(t, 30*time.Second, "the warning gone once the new count is applied", func() bool {
		warn = srv.inv.warnings(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV)
		return len(warn) == 0
	})

	_, err = srv.Configure(ctx, &provisionerv1.ConfigureRequest{
		Managers: &provisionerv1.ManagerConfigs{Sriov: &provisionerv1.SriovConfig{Enabled: true,
			Ifaces: []*provisionerv1.SriovInterface{{IfName: pf, VfCount: 8}}}},
		PreparedVfs: &provisionerv1.PreparedVfs{}})
	var fe *fielderr.Error
	if !errors.As(err, &fe) || fe.Field != "managers.sriov.ifaces[0].vfCount" {
		t.Errorf("Configure of 8 VFs = %v, want a field error on managers.sriov.ifaces[0].vfCount", err)
	}
	t.Logf("8 VFs: %v", err)
	if got := numvfs(); got != "4\n" {
		t.Errorf("sriov_numvfs %q after a refused count, want 4", got)
	}
}
