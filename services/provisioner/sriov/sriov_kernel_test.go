//go:build kernelrig

// Kernel-rig tests: every VF setting through a real kernel's rtnetlink and
// netdevsim's ndo_set_vf_* ops, and Run's real link event subscription.
// netdevsim VFs have no PCI device and no netdev, so the devices are built
// by hand (pf_name, vf_index) and discovery stays on fake sysfs trees.
package sriov

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

const (
	nsimBus    = "/sys/bus/netdevsim"
	nsimID     = 1
	nsimNumVFs = 4
)

// nsim is the package's one netdevsim device, shared by its tests.
var nsim struct {
	once sync.Once
	pf   string
	err  error
}

// netdevsimPF returns the PF netdev of a netdevsim device with 4 VFs,
// created on first use.
func netdevsimPF(t *testing.T) string {
	t.Helper()
	nsim.once.Do(func() { nsim.pf, nsim.err = newNetdevsim(nsimID, nsimNumVFs) })
	if nsim.err != nil {
		t.Fatalf("netdevsim: %v", nsim.err)
	}
	return nsim.pf
}

func newNetdevsim(id, numVFs int) (string, error) {
	if err := os.WriteFile(nsimBus+"/new_device", fmt.Appendf(nil, "%d 1", id), 0); err != nil {
		return "", fmt.Errorf("new_device: %w", err)
	}
	dev := fmt.Sprintf("%s/devices/netdevsim%d", nsimBus, id)
	if err := os.WriteFile(dev+"/sriov_numvfs", fmt.Append(nil, numVFs), 0); err != nil {
		return "", fmt.Errorf("sriov_numvfs: %w", err)
	}
	var names []string
	for deadline := time.Now().Add(5 * time.Second); len(names) == 0 && time.Now().Before(deadline); {
		if names, _ = filepath.Glob(dev + "/net/*"); len(names) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("want 1 PF netdev under %s/net, got %v", dev, names)
	}
	return filepath.Base(names[0]), nil
}

// vfView is what the kernel reports of a VF, read with netlink directly
// (not through pfLinks), with the VLAN protocol 0 that netdevsim reports
// before any VLAN was set read as 802.1Q, as the kernel defaults it.
type vfView struct {
	MAC       string
	Vlan, Qos int
	Proto     int
	SpoofChk  bool
	Trust     bool
	LinkState uint32
	MinTxRate uint32
	MaxTxRate uint32
}

func kernelVF(t *testing.T, pf string, vf int) vfView {
	t.Helper()
	l, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	vfs := l.Attrs().Vfs
	if vf >= len(vfs) {
		t.Fatalf("%s has %d VFs, no VF %d", pf, len(vfs), vf)
	}
	v := vfs[vf]
	proto := v.VlanProto
	if proto == 0 {
		proto = 0x8100
	}
	return vfView{MAC: v.Mac.String(), Vlan: v.Vlan, Qos: v.Qos, Proto: proto, SpoofChk: v.Spoofchk,
		Trust: v.Trust != 0, LinkState: v.LinkState, MinTxRate: v.MinTxRate, MaxTxRate: v.MaxTxRate}
}

// resetVF puts VF vf of pf back to netdevsim's defaults, with netlink
// directly.
func resetVF(t *testing.T, pf string, vf int) {
	t.Helper()
	l, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		netlink.LinkSetVfHardwareAddr(l, vf, make(net.HardwareAddr, 6)),
		netlink.LinkSetVfVlanQos(l, vf, 0, 0),
		netlink.LinkSetVfSpoofchk(l, vf, false),
		netlink.LinkSetVfTrust(l, vf, false),
		netlink.LinkSetVfState(l, vf, netlink.VF_LINK_STATE_AUTO),
		netlink.LinkSetVfRate(l, vf, 0, 0),
	} {
		if err != nil {
			t.Fatalf("resetting VF %d of %s: %v", vf, pf, err)
		}
	}
}

func nsimVF(pf string, vf int) *devicev1.Device {
	return &devicev1.Device{Name: fmt.Sprintf("nsim-vf%d", vf), Manager: sriov, PfName: pf, VfIndex: new(int32(vf))}
}

func TestKernel_VFSettings(t *testing.T) {
	kernelrig.Require(t)
	pf := netdevsimPF(t)
	m, err := New(testLogger(t), "/sys", nil)
	if err != nil {
		t.Fatal(err)
	}
	mac := "02:aa:bb:cc:dd:01"
	for i, tc := range []struct {
		name string
		// prepare sets the VF up before Setup, for an original that is not
		// netdevsim's default.
		prepare func(l netlink.Link, vf int) error
		cfg     *devicev1.DeviceConfig
		// want edits the VF's view before Setup into the one after.
		want func(v *vfView)
	}{
		{name: "vlan 100 qos 3 802.1ad",
			cfg:  &devicev1.DeviceConfig{Vlan: new(uint32(100)), VlanQos: new(uint32(3)), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD},
			want: func(v *vfView) { v.Vlan, v.Qos, v.Proto = 100, 3, 0x88a8 }},
		{name: "vlan 200 802.1Q",
			cfg:  &devicev1.DeviceConfig{Vlan: new(uint32(200)), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q},
			want: func(v *vfView) { v.Vlan, v.Qos, v.Proto = 200, 0, 0x8100 }},
		{name: "vlan cleared from an 802.1ad original",
			prepare: func(l netlink.Link, vf int) error { return netlink.LinkSetVfVlanQosProto(l, vf, 300, 5, 0x88a8) },
			cfg:     &devicev1.DeviceConfig{Vlan: new(uint32(0))},
			want:    func(v *vfView) { v.Vlan, v.Qos, v.Proto = 0, 0, 0x8100 }},
		{name: "mac",
			cfg:  &devicev1.DeviceConfig{MacAddress: mac},
			want: func(v *vfView) { v.MAC = mac }},
		{name: "mac over another admin mac",
			prepare: func(l netlink.Link, vf int) error {
				return netlink.LinkSetVfHardwareAddr(l, vf, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99})
			},
			cfg:  &devicev1.DeviceConfig{MacAddress: mac},
			want: func(v *vfView) { v.MAC = mac }},
		{name: "spoofchk on",
			cfg:  &devicev1.DeviceConfig{SpoofChk: new(true)},
			want: func(v *vfView) { v.SpoofChk = true }},
		{name: "spoofchk off",
			prepare: func(l netlink.Link, vf int) error { return netlink.LinkSetVfSpoofchk(l, vf, true) },
			cfg:     &devicev1.DeviceConfig{SpoofChk: new(false)},
			want:    func(v *vfView) { v.SpoofChk = false }},
		{name: "trust on",
			cfg:  &devicev1.DeviceConfig{Trust: new(true)},
			want: func(v *vfView) { v.Trust = true }},
		{name: "link state enable",
			cfg:  &devicev1.DeviceConfig{LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE},
			want: func(v *vfView) { v.LinkState = netlink.VF_LINK_STATE_ENABLE }},
		{name: "link state disable",
			cfg:  &devicev1.DeviceConfig{LinkState: devicev1.VfLinkState_VF_LINK_STATE_DISABLE},
			want: func(v *vfView) { v.LinkState = netlink.VF_LINK_STATE_DISABLE }},
		{name: "link state auto from enable",
			prepare: func(l netlink.Link, vf int) error { return netlink.LinkSetVfState(l, vf, netlink.VF_LINK_STATE_ENABLE) },
			cfg:     &devicev1.DeviceConfig{LinkState: devicev1.VfLinkState_VF_LINK_STATE_AUTO},
			want:    func(v *vfView) { v.LinkState = netlink.VF_LINK_STATE_AUTO }},
		{name: "min 10 max 100 tx rate",
			cfg:  &devicev1.DeviceConfig{MinTxRate: new(uint32(10)), MaxTxRate: new(uint32(100))},
			want: func(v *vfView) { v.MinTxRate, v.MaxTxRate = 10, 100 }},
		{name: "max tx rate only keeps the min",
			prepare: func(l netlink.Link, vf int) error { return netlink.LinkSetVfRate(l, vf, 5, 50) },
			cfg:     &devicev1.DeviceConfig{MaxTxRate: new(uint32(500))},
			want:    func(v *vfView) { v.MaxTxRate = 500 }},
		{name: "everything at once", cfg: allSettings(),
			want: func(v *vfView) {
				*v = vfView{MAC: "02:aa:bb:cc:dd:ee", Vlan: 100, Qos: 3, Proto: 0x88a8, SpoofChk: false, Trust: true,
					LinkState: netlink.VF_LINK_STATE_DISABLE, MinTxRate: 10, MaxTxRate: 100}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vf := i % nsimNumVFs
			resetVF(t, pf, vf)
			t.Cleanup(func() { resetVF(t, pf, vf) })
			if tc.prepare != nil {
				l, err := netlink.LinkByName(pf)
				if err != nil {
					t.Fatal(err)
				}
				if err := tc.prepare(l, vf); err != nil {
					t.Fatalf("prepare: %v", err)
				}
			}
			before := kernelVF(t, pf, vf)
			dev := nsimVF(pf, vf)

			pd, err := m.Setup(t.Context(), dev, tc.cfg, "")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			want := before
			tc.want(&want)
			if diff := cmp.Diff(want, kernelVF(t, pf, vf)); diff != "" {
				t.Errorf("VF after Setup (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(snapshotOfView(before), pd.GetOriginalVf(), protocmp.Transform()); diff != "" {
				t.Errorf("original_vf (-want +got):\n%s", diff)
			}
			if pd.GetOriginalLink() != nil {
				t.Errorf("original_link %v for a VF with no netdev", pd.GetOriginalLink())
			}
			for n := range 2 {
				if err := m.Free(t.Context(), pd); err != nil {
					t.Fatalf("Free #%d: %v", n+1, err)
				}
				if diff := cmp.Diff(before, kernelVF(t, pf, vf)); diff != "" {
					t.Errorf("VF after Free #%d (-want +got):\n%s", n+1, diff)
				}
			}
		})
	}
}

// snapshotOfView is the VfSnapshot Setup should record for v.
func snapshotOfView(v vfView) *devicev1.VfSnapshot {
	mac, _ := net.ParseMAC(v.MAC)
	return snapshotOf(vfState{MAC: mac, Vlan: uint32(v.Vlan), Qos: uint32(v.Qos), Proto: uint16(v.Proto),
		SpoofChk: v.SpoofChk, Trust: v.Trust, LinkState: v.LinkState, MinTxRate: v.MinTxRate, MaxTxRate: v.MaxTxRate})
}

// failing is the real pfLinks with one setting failing; it records the
// settings it is asked to apply.
type failing struct {
	netlinkLinks
	s     setting
	err   error
	calls []string
}

func (f *failing) SetVF(pf string, vf int, s setting, want vfState) error {
	f.calls = append(f.calls, s.describe(want))
	if s == f.s {
		return f.err
	}
	return f.netlinkLinks.SetVF(pf, vf, s, want)
}

func TestKernel_SetupRollback(t *testing.T) {
	kernelrig.Require(t)
	pf := netdevsimPF(t)
	const vf = 1
	resetVF(t, pf, vf)
	t.Cleanup(func() { resetVF(t, pf, vf) })
	before := kernelVF(t, pf, vf)
	// The VF's spoofchk is already off, as allSettings asks: the 3rd
	// setting changed is trust.
	errBoom := errors.New("trust: operation not supported")
	links := &failing{s: settingTrust, err: errBoom}
	m, err := New(testLogger(t), "/sys", nil, withLinks(links))
	if err != nil {
		t.Fatal(err)
	}
	pd, err := m.Setup(t.Context(), nsimVF(pf, vf), allSettings(), "")
	if !errors.Is(err, errBoom) || pd != nil {
		t.Fatalf("Setup = %v, %v; want %v", pd, err, errBoom)
	}
	t.Logf("Setup: %v", err)
	if diff := cmp.Diff(before, kernelVF(t, pf, vf)); diff != "" {
		t.Errorf("VF after a failed Setup (-want +got):\n%s", diff)
	}
	wantCalls := []string{
		"vlan 100 qos 3 proto 0x88a8",
		"mac 02:aa:bb:cc:dd:ee",
		"trust true",
		"mac 00:00:00:00:00:00",
		"vlan 0 qos 0 proto 0x8100",
	}
	if diff := cmp.Diff(wantCalls, links.calls); diff != "" {
		t.Errorf("settings applied (-want +got):\n%s", diff)
	}
}

func TestKernel_Errors(t *testing.T) {
	kernelrig.Require(t)
	pf := netdevsimPF(t)
	m, err := New(testLogger(t), "/sys", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &devicev1.DeviceConfig{Vlan: new(uint32(7))}
	if _, err := m.Setup(t.Context(), nsimVF(pf, nsimNumVFs), cfg, ""); !errors.Is(err, ErrVFNotFound) {
		t.Errorf("Setup of a VF beyond the PF's: %v, want %v", err, ErrVFNotFound)
	}
	if _, err := m.Setup(t.Context(), nsimVF("nsimnope0", 0), cfg, ""); !errors.Is(err, ErrPFNotFound) {
		t.Errorf("Setup on a missing PF: %v, want %v", err, ErrPFNotFound)
	}
	pd := &devicev1.PreparedDevice{Device: nsimVF(pf, nsimNumVFs), OriginalVf: freshSnapshot()}
	if err := m.Free(t.Context(), pd); err != nil {
		t.Errorf("Free of a VF that is gone: %v, want nil", err)
	}
	pd.Device = nsimVF("nsimnope0", 0)
	if err := m.Free(t.Context(), pd); !errors.Is(err, ErrPFNotFound) {
		t.Errorf("Free on a missing PF: %v, want %v", err, ErrPFNotFound)
	}
}

// TestKernel_OriginalLink records the identity of the VF's netdev; a dummy
// link stands in for it, as netdevsim VFs have none.
func TestKernel_OriginalLink(t *testing.T) {
	kernelrig.Require(t)
	pf := netdevsimPF(t)
	const name = "sriovdum0"
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0x0d, 0x01}
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac, MTU: 1400}}); err != nil {
		t.Fatalf("adding %s: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	m, err := New(testLogger(t), "/sys", nil)
	if err != nil {
		t.Fatal(err)
	}
	dev := nsimVF(pf, 2)
	dev.KernelIfName = name
	pd, err := m.Setup(t.Context(), dev, nil, "")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	want := &devicev1.LinkSnapshot{Name: name, MacAddress: mac.String(), Mtu: 1400, Up: true}
	if diff := cmp.Diff(want, pd.GetOriginalLink(), protocmp.Transform()); diff != "" {
		t.Errorf("original_link (-want +got):\n%s", diff)
	}
	if err := m.Free(t.Context(), pd); err != nil {
		t.Errorf("Free: %v", err)
	}
}

// TestKernel_RunLinkEvents checks that a real link event makes Run rescan:
// with an hour's resync, only the event can publish the hotplugged VF.
func TestKernel_RunLinkEvents(t *testing.T) {
	kernelrig.Require(t)
	root := fixtureTree(t)
	m, err := New(testLogger(t), root, intelCfg(2), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	wantDevices(t, "first publication", fixtureVFs()[:2], r.next(t))
	hotplug(t, root, intelVF2, 2)
	const name = "sriovev0"
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		t.Fatalf("adding %s: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	wantDevices(t, "after a link event", append(fixtureVFs()[:2], intelVF2Device()), r.next(t))
}
