package sriov

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// fakeLinks is pfLinks over an in-memory table of PFs and their VFs. It
// records every SetVF call as "pf/vf <setting value>", and fails the calls
// for the settings in fail without changing anything.
type fakeLinks struct {
	mu    sync.Mutex
	vfs   map[string][]vfState
	links map[string]*devicev1.LinkSnapshot
	fail  map[setting]error
	calls []string
	reads []string // the PFs VF was asked about
}

var _ pfLinks = (*fakeLinks)(nil)

func (f *fakeLinks) VF(pf string, vf int) (vfState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, pf)
	vfs, ok := f.vfs[pf]
	switch {
	case !ok:
		return vfState{}, fmt.Errorf("PF %s: %w", pf, ErrPFNotFound)
	case vf < 0 || vf >= len(vfs):
		return vfState{}, fmt.Errorf("VF %d on %s: %w", vf, pf, ErrVFNotFound)
	}
	st := vfs[vf]
	st.MAC = bytes.Clone(st.MAC)
	return st, nil
}

func (f *fakeLinks) SetVF(pf string, vf int, s setting, want vfState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s/%d %s", pf, vf, s.describe(want)))
	if err := f.fail[s]; err != nil {
		return err
	}
	vfs, ok := f.vfs[pf]
	if !ok || vf >= len(vfs) {
		return errors.New("no such VF")
	}
	st := &vfs[vf]
	switch s {
	case settingVlan:
		st.Vlan, st.Qos, st.Proto = want.Vlan, want.Qos, normProto(want.Proto)
	case settingMAC:
		st.MAC = bytes.Clone(want.MAC)
	case settingSpoofChk:
		st.SpoofChk = want.SpoofChk
	case settingTrust:
		st.Trust = want.Trust
	case settingLinkState:
		st.LinkState = want.LinkState
	case settingRate:
		st.MinTxRate, st.MaxTxRate = want.MinTxRate, want.MaxTxRate
	}
	return nil
}

func (f *fakeLinks) Link(name string) (*devicev1.LinkSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("link %s: not found", name)
}

func (f *fakeLinks) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// fresh is a VF as a driver reports it before anyone configured it.
var fresh = vfState{
	MAC:      net.HardwareAddr{0x02, 0, 0, 0, 0, 0x10},
	Proto:    protoQ,
	SpoofChk: true,
}

func newFake() *fakeLinks {
	return &fakeLinks{
		vfs: map[string][]vfState{"ens1f0": {fresh, fresh}},
		links: map[string]*devicev1.LinkSnapshot{
			"ens1f0v1": {Name: "ens1f0v1", MacAddress: "02:00:00:03:02:01", Mtu: 1500, Up: true},
		},
	}
}

// vf1 is VF 1 of ens1f0 with its netdev; vfio is the same VF bound to vfio.
var (
	vf1 = &devicev1.Device{Name: "0000-03-02-1", Manager: sriov, KernelIfName: "ens1f0v1",
		PciAddress: "0000:03:02.1", PfName: "ens1f0", VfIndex: new(int32(1)), Driver: "iavf"}
	vfio = &devicev1.Device{Name: "0000-03-02-1", Manager: sriov,
		PciAddress: "0000:03:02.1", PfName: "ens1f0", VfIndex: new(int32(1)), Driver: "vfio-pci"}
)

// freshSnapshot is fresh as a VfSnapshot.
func freshSnapshot() *devicev1.VfSnapshot {
	return &devicev1.VfSnapshot{MacAddress: "02:00:00:00:00:10", VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q,
		SpoofChk: true, LinkState: devicev1.VfLinkState_VF_LINK_STATE_AUTO}
}

// newTestManager is a Manager on the sysfs tree at root with links.
func newTestManager(t *testing.T, root string, links pfLinks) *Manager {
	t.Helper()
	m, err := New(testLogger(t), root, nil, withLinks(links))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// allSettings sets every VF setting to a value fresh does not have.
func allSettings() *devicev1.DeviceConfig {
	return &devicev1.DeviceConfig{
		Vlan: new(uint32(100)), VlanQos: new(uint32(3)), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD,
		MacAddress: "02:aa:bb:cc:dd:ee", SpoofChk: new(false), Trust: new(true),
		LinkState: devicev1.VfLinkState_VF_LINK_STATE_DISABLE, MinTxRate: new(uint32(10)), MaxTxRate: new(uint32(100)),
	}
}

func TestManager_Setup(t *testing.T) {
	// vfio (0000:03:02.1 bound to vfio-pci) is in IOMMU group 7.
	root := fixtureTree(t, node{path: "kernel/iommu_groups/7/devices"},
		node{path: "devices/pci0000:00/0000:00:02.0/0000:03:02.1/iommu_group", target: "kernel/iommu_groups/7"})
	origLink := &devicev1.LinkSnapshot{Name: "ens1f0v1", MacAddress: "02:00:00:03:02:01", Mtu: 1500, Up: true}
	for _, tc := range []struct {
		name      string
		dev       *devicev1.Device
		cfg       *devicev1.DeviceConfig
		before    vfState // VF 1's state before Setup; fresh when zero
		wantCalls []string
		wantVF    vfState // VF 1's state after Setup
		wantLink  *devicev1.LinkSnapshot
		wantNodes []*devicev1.DeviceNode
	}{
		{name: "nil config changes nothing", dev: vf1,
			wantVF: fresh, wantLink: origLink},
		{name: "empty config changes nothing", dev: vf1, cfg: &devicev1.DeviceConfig{PodIfName: "net1", Mtu: 1400},
			wantVF: fresh, wantLink: origLink},
		{name: "every setting, in order", dev: vf1, cfg: allSettings(),
			wantCalls: []string{
				"ens1f0/1 vlan 100 qos 3 proto 0x88a8",
				"ens1f0/1 mac 02:aa:bb:cc:dd:ee",
				"ens1f0/1 spoofchk false",
				"ens1f0/1 trust true",
				"ens1f0/1 link state 2",
				"ens1f0/1 min_tx_rate 10 max_tx_rate 100",
			},
			wantVF: vfState{MAC: net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}, Vlan: 100, Qos: 3, Proto: protoAD,
				Trust: true, LinkState: linkStateDisable, MinTxRate: 10, MaxTxRate: 100},
			wantLink: origLink},
		{name: "only the set fields", dev: vf1, cfg: &devicev1.DeviceConfig{Trust: new(true), LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE},
			wantCalls: []string{"ens1f0/1 trust true", "ens1f0/1 link state 1"},
			wantVF:    func() vfState { s := fresh; s.Trust, s.LinkState = true, linkStateEnable; return s }(),
			wantLink:  origLink},
		{name: "a vlan alone is 802.1Q with qos 0", dev: vf1, cfg: &devicev1.DeviceConfig{Vlan: new(uint32(42))},
			before:    func() vfState { s := fresh; s.Qos = 0; return s }(),
			wantCalls: []string{"ens1f0/1 vlan 42 qos 0 proto 0x8100"},
			wantVF:    func() vfState { s := fresh; s.Vlan = 42; return s }(),
			wantLink:  origLink},
		{name: "a value the VF already has is not set again", dev: vf1, cfg: &devicev1.DeviceConfig{SpoofChk: new(true), Vlan: new(uint32(0))},
			wantVF: fresh, wantLink: origLink},
		{name: "max rate alone keeps the min rate", dev: vf1, cfg: &devicev1.DeviceConfig{MaxTxRate: new(uint32(500))},
			before:    func() vfState { s := fresh; s.MinTxRate, s.MaxTxRate = 20, 200; return s }(),
			wantCalls: []string{"ens1f0/1 min_tx_rate 20 max_tx_rate 500"},
			wantVF:    func() vfState { s := fresh; s.MinTxRate, s.MaxTxRate = 20, 500; return s }(),
			wantLink:  origLink},
		{name: "a vfio-bound VF gets the settings only", dev: vfio, cfg: &devicev1.DeviceConfig{MacAddress: "02:aa:bb:cc:dd:ee"},
			wantCalls: []string{"ens1f0/1 mac 02:aa:bb:cc:dd:ee"},
			wantVF:    func() vfState { s := fresh; s.MAC = net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}; return s }(),
			wantNodes: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/7", Path: "/dev/vfio/7"}, {HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}}},
		{name: "a vfio-bound VF with no setting: its device nodes, the PF untouched", dev: vfio, cfg: &devicev1.DeviceConfig{Vfio: new(true)},
			wantVF:    fresh,
			wantNodes: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/7", Path: "/dev/vfio/7"}, {HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := newFake()
			before := fresh
			if tc.before.MAC != nil {
				before = tc.before
				links.vfs["ens1f0"][1] = before
			}
			m := newTestManager(t, root, links)
			pd, err := m.Setup(t.Context(), tc.dev, tc.cfg, "")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			if diff := cmp.Diff(tc.wantCalls, links.takeCalls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantVF, links.vfs["ens1f0"][1]); diff != "" {
				t.Errorf("VF after Setup (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(fresh, links.vfs["ens1f0"][0]); diff != "" {
				t.Errorf("VF 0 changed (-want +got):\n%s", diff)
			}
			want := &devicev1.PreparedDevice{Device: tc.dev, OriginalLink: tc.wantLink, DeviceNodes: tc.wantNodes}
			if asksVF(tc.cfg) {
				want.OriginalVf = snapshotOf(before)
			} else if len(links.reads) > 0 {
				t.Errorf("a config with no VF setting read the PF: %q", links.reads)
			}
			if diff := cmp.Diff(want, pd, protocmp.Transform()); diff != "" {
				t.Errorf("prepared device (-want +got):\n%s", diff)
			}

			// Free puts back exactly what was there; a second Free does
			// nothing.
			for i := range 2 {
				if err := m.Free(t.Context(), pd); err != nil {
					t.Fatalf("Free #%d: %v", i+1, err)
				}
				if diff := cmp.Diff(before, links.vfs["ens1f0"][1]); diff != "" {
					t.Errorf("VF after Free #%d (-want +got):\n%s", i+1, diff)
				}
				if calls := links.takeCalls(); i == 1 && len(calls) > 0 {
					t.Errorf("second Free made calls: %q", calls)
				}
			}
		})
	}
}

func TestManager_SetupErrors(t *testing.T) {
	root := fixtureTree(t)
	errBoom := errors.New("operation not supported")
	for _, tc := range []struct {
		name      string
		dev       *devicev1.Device
		cfg       *devicev1.DeviceConfig
		fail      map[setting]error
		before    vfState
		cancel    bool
		wantErr   error
		wantField string
		wantCalls []string
	}{
		{name: "the 3rd setting fails: the first two are restored", dev: vf1, cfg: allSettings(),
			fail: map[setting]error{settingSpoofChk: errBoom}, wantErr: errBoom,
			wantCalls: []string{
				"ens1f0/1 vlan 100 qos 3 proto 0x88a8",
				"ens1f0/1 mac 02:aa:bb:cc:dd:ee",
				"ens1f0/1 spoofchk false",
				"ens1f0/1 mac 02:00:00:00:00:10",
				"ens1f0/1 vlan 0 qos 0 proto 0x8100",
			}},
		{name: "the last setting fails: all others are restored", dev: vf1, cfg: allSettings(),
			fail: map[setting]error{settingRate: errBoom}, wantErr: errBoom,
			wantCalls: []string{
				"ens1f0/1 vlan 100 qos 3 proto 0x88a8",
				"ens1f0/1 mac 02:aa:bb:cc:dd:ee",
				"ens1f0/1 spoofchk false",
				"ens1f0/1 trust true",
				"ens1f0/1 link state 2",
				"ens1f0/1 min_tx_rate 10 max_tx_rate 100",
				"ens1f0/1 link state 0",
				"ens1f0/1 trust false",
				"ens1f0/1 spoofchk true",
				"ens1f0/1 mac 02:00:00:00:00:10",
				"ens1f0/1 vlan 0 qos 0 proto 0x8100",
			}},
		{name: "the first setting fails: nothing to restore", dev: vf1, cfg: allSettings(),
			fail: map[setting]error{settingVlan: errBoom}, wantErr: errBoom,
			wantCalls: []string{"ens1f0/1 vlan 100 qos 3 proto 0x88a8"}},
		// What the Intel 82576's driver (igb) refuses: the claim's field is
		// named, and the VF is left as it was.
		{name: "driver refuses 802.1ad", dev: vf1, cfg: &devicev1.DeviceConfig{Vlan: new(uint32(10)), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD},
			fail: map[setting]error{settingVlan: unix.EPROTONOSUPPORT}, wantField: "config.vlanProto",
			wantCalls: []string{"ens1f0/1 vlan 10 qos 0 proto 0x88a8"}},
		{name: "driver refuses the link state", dev: vf1, cfg: &devicev1.DeviceConfig{Trust: new(true), LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE},
			fail: map[setting]error{settingLinkState: unix.EOPNOTSUPP}, wantField: "config.linkState",
			wantCalls: []string{"ens1f0/1 trust true", "ens1f0/1 link state 1", "ens1f0/1 trust false"}},
		{name: "driver refuses a min tx rate", dev: vf1, cfg: &devicev1.DeviceConfig{MinTxRate: new(uint32(10)), MaxTxRate: new(uint32(100))},
			fail: map[setting]error{settingRate: unix.EINVAL}, wantField: "config.minTxRate",
			wantCalls: []string{"ens1f0/1 min_tx_rate 10 max_tx_rate 100"}},
		{name: "driver refuses a max tx rate", dev: vf1, cfg: &devicev1.DeviceConfig{MaxTxRate: new(uint32(100))},
			fail: map[setting]error{settingRate: unix.EINVAL}, wantField: "config.maxTxRate",
			wantCalls: []string{"ens1f0/1 min_tx_rate 0 max_tx_rate 100"}},
		{name: "cancelled", dev: vf1, cfg: allSettings(), cancel: true, wantErr: context.Canceled},
		{name: "PF missing", dev: withPF(vf1, "ens7"), cfg: allSettings(), wantErr: ErrPFNotFound},
		{name: "VF index beyond the PF's VFs", dev: withIndex(vf1, 5), cfg: allSettings(), wantErr: ErrVFNotFound},
		{name: "not a VF", dev: &devicev1.Device{Name: "eth0", KernelIfName: "eth0"}, cfg: allSettings(), wantErr: ErrNotVF},
		{name: "invalid config", dev: vf1, cfg: &devicev1.DeviceConfig{VlanQos: new(uint32(3))}, wantField: "config.vlanQoS"},
		{name: "min rate above the VF's current max rate", dev: vf1, cfg: &devicev1.DeviceConfig{MinTxRate: new(uint32(60))},
			before:    func() vfState { s := fresh; s.MaxTxRate = 50; return s }(),
			wantField: "config.minTxRate"},
		{name: "netdev missing", dev: withIfName(vf1, "ens1f0v9"), cfg: allSettings(), wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := newFake()
			links.fail = tc.fail
			before := fresh
			if tc.before.MAC != nil {
				before = tc.before
				links.vfs["ens1f0"][1] = before
			}
			m := newTestManager(t, root, links)
			ctx, cancel := context.WithCancel(t.Context())
			if tc.cancel {
				cancel()
			}
			defer cancel()
			pd, err := m.Setup(ctx, tc.dev, tc.cfg, "")
			if pd != nil || err == nil {
				t.Fatalf("Setup = %v, %v; want an error", pd, err)
			}
			t.Logf("error: %v", err)
			if tc.wantField != "" {
				checkField(t, err, tc.wantField)
			} else if tc.wantErr != errAny && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, links.takeCalls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, links.vfs["ens1f0"][1]); diff != "" {
				t.Errorf("VF changed by a failed Setup (-want +got):\n%s", diff)
			}
		})
	}
}

// errAny stands for any error in a table.
var errAny = errors.New("any error")

func TestManager_SetupRollbackFails(t *testing.T) {
	root := fixtureTree(t)
	links := newFake()
	errSpoof, errMAC := errors.New("spoofchk: not supported"), errors.New("mac: busy")
	m := newTestManager(t, root, links)
	links.fail = map[setting]error{settingSpoofChk: errSpoof}
	// The MAC goes through on the way in and fails on the way back.
	cfg := &devicev1.DeviceConfig{MacAddress: "02:aa:bb:cc:dd:ee", SpoofChk: new(false)}
	failMACOnRestore := &failAfter{fakeLinks: links, s: settingMAC, after: 1, err: errMAC}
	m.links = failMACOnRestore
	_, err := m.Setup(t.Context(), vf1, cfg, "")
	if !errors.Is(err, errSpoof) || !errors.Is(err, errMAC) {
		t.Fatalf("Setup error %v, want both %v and %v", err, errSpoof, errMAC)
	}
	t.Logf("error: %v", err)
}

// failAfter fails SetVF for setting s after it succeeded after times.
type failAfter struct {
	*fakeLinks
	s     setting
	after int
	err   error
}

func (f *failAfter) SetVF(pf string, vf int, s setting, want vfState) error {
	if s == f.s {
		if f.after == 0 {
			return f.err
		}
		f.after--
	}
	return f.fakeLinks.SetVF(pf, vf, s, want)
}

func TestManager_Free(t *testing.T) {
	root := fixtureTree(t)
	errBoom := errors.New("operation not supported")
	configured := vfState{MAC: net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}, Vlan: 100, Qos: 3, Proto: protoAD,
		Trust: true, LinkState: linkStateDisable, MinTxRate: 10, MaxTxRate: 100}
	for _, tc := range []struct {
		name      string
		pd        *devicev1.PreparedDevice
		fail      map[setting]error
		wantErr   error
		wantCalls []string
		wantVF    vfState
	}{
		{name: "restores every setting", pd: &devicev1.PreparedDevice{Device: vf1, OriginalVf: freshSnapshot()},
			wantCalls: []string{
				"ens1f0/1 vlan 0 qos 0 proto 0x8100",
				"ens1f0/1 mac 02:00:00:00:00:10",
				"ens1f0/1 spoofchk true",
				"ens1f0/1 trust false",
				"ens1f0/1 link state 0",
				"ens1f0/1 min_tx_rate 0 max_tx_rate 0",
			},
			wantVF: fresh},
		{name: "restores a configured original", pd: &devicev1.PreparedDevice{Device: vf1, OriginalVf: snapshotOf(configured)},
			wantVF: configured},
		{name: "one failing setting does not stop the others", pd: &devicev1.PreparedDevice{Device: vf1, OriginalVf: freshSnapshot()},
			fail: map[setting]error{settingTrust: errBoom}, wantErr: errBoom,
			wantCalls: []string{
				"ens1f0/1 vlan 0 qos 0 proto 0x8100",
				"ens1f0/1 mac 02:00:00:00:00:10",
				"ens1f0/1 spoofchk true",
				"ens1f0/1 trust false",
				"ens1f0/1 link state 0",
				"ens1f0/1 min_tx_rate 0 max_tx_rate 0",
			},
			wantVF: func() vfState { s := fresh; s.Trust = true; return s }()},
		{name: "unspecified snapshot fields are left", pd: &devicev1.PreparedDevice{Device: vf1, OriginalVf: &devicev1.VfSnapshot{
			MacAddress: "", Vlan: 0, SpoofChk: true, MinTxRate: 0}},
			wantCalls: []string{
				"ens1f0/1 vlan 0 qos 0 proto 0x8100",
				"ens1f0/1 spoofchk true",
				"ens1f0/1 trust false",
				"ens1f0/1 min_tx_rate 0 max_tx_rate 0",
			},
			wantVF: func() vfState { s := fresh; s.MAC, s.LinkState = configured.MAC, configured.LinkState; return s }()},
		{name: "no original_vf: nothing to do", pd: &devicev1.PreparedDevice{Device: vf1}, wantVF: configured},
		{name: "VF gone: nothing to do", pd: &devicev1.PreparedDevice{Device: withIndex(vf1, 7), OriginalVf: freshSnapshot()}, wantVF: configured},
		{name: "PF gone", pd: &devicev1.PreparedDevice{Device: withPF(vf1, "ens7"), OriginalVf: freshSnapshot()},
			wantErr: ErrPFNotFound, wantVF: configured},
		{name: "not a VF", pd: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "x"}, OriginalVf: freshSnapshot()},
			wantErr: ErrNotVF, wantVF: configured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := newFake()
			links.vfs["ens1f0"][1] = configured
			links.fail = tc.fail
			m := newTestManager(t, root, links)
			err := m.Free(t.Context(), tc.pd)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Free error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, links.takeCalls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantVF, links.vfs["ens1f0"][1]); diff != "" {
				t.Errorf("VF after Free (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   vfState
		want *devicev1.VfSnapshot
	}{
		{name: "fresh", st: fresh, want: freshSnapshot()},
		{name: "unreported proto is 802.1Q", st: vfState{MAC: make(net.HardwareAddr, 6)}, want: &devicev1.VfSnapshot{
			MacAddress: "00:00:00:00:00:00", VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q, LinkState: devicev1.VfLinkState_VF_LINK_STATE_AUTO}},
		{name: "everything", st: vfState{MAC: net.HardwareAddr{2, 1, 2, 3, 4, 5}, Vlan: 4095, Qos: 7, Proto: protoAD,
			SpoofChk: true, Trust: true, LinkState: linkStateEnable, MinTxRate: 1, MaxTxRate: 2},
			want: &devicev1.VfSnapshot{MacAddress: "02:01:02:03:04:05", Vlan: 4095, VlanQos: 7, VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD,
				SpoofChk: true, Trust: true, LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE, MinTxRate: 1, MaxTxRate: 2}},
		{name: "unknown link state", st: vfState{MAC: make(net.HardwareAddr, 6), Proto: protoQ, LinkState: 9}, want: &devicev1.VfSnapshot{
			MacAddress: "00:00:00:00:00:00", VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := snapshotOf(tc.st)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("snapshotOf (-want +got):\n%s", diff)
			}
			back := stateOf(got, tc.st)
			for s := range numSettings {
				if !s.same(back, tc.st) {
					t.Errorf("stateOf(snapshotOf(st)) differs in %s: %s, want %s", s, s.describe(back), s.describe(tc.st))
				}
			}
		})
	}
}

func withPF(d *devicev1.Device, pf string) *devicev1.Device {
	c := proto.CloneOf(d)
	c.PfName = pf
	return c
}

func withIndex(d *devicev1.Device, i int32) *devicev1.Device {
	c := proto.CloneOf(d)
	c.VfIndex = &i
	return c
}

func withIfName(d *devicev1.Device, name string) *devicev1.Device {
	c := proto.CloneOf(d)
	c.KernelIfName = name
	return c
}
