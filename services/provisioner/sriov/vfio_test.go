package sriov

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/fielderr"
)

// mlxVF1 is the fixture's vfio-bound VF (IOMMU group 41) as discovered.
func mlxVF1(t *testing.T, root string) *devicev1.Device {
	t.Helper()
	devs, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.GetPciAddress() == mlxVF1vfio.addr {
			return d
		}
	}
	t.Fatalf("%s not discovered", mlxVF1vfio.addr)
	return nil
}

func TestSetup_VfioDeviceNodes(t *testing.T) {
	noiommu := mlxVF1vfio
	noiommu.noiommu = true
	for _, tc := range []struct {
		name    string
		vf      pciDev
		devRoot string
		want    []*devicev1.DeviceNode
	}{
		{name: "an IOMMU group", vf: mlxVF1vfio,
			want: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/41", Path: "/dev/vfio/41"}, {HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}}},
		{name: "vfio's no-IOMMU mode", vf: noiommu,
			want: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/noiommu-41", Path: "/dev/vfio/noiommu-41"}, {HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}}},
		{name: "device nodes elsewhere on the host", vf: mlxVF1vfio, devRoot: "/run/test/dev",
			want: []*devicev1.DeviceNode{{HostPath: "/run/test/dev/vfio/41", Path: "/dev/vfio/41"}, {HostPath: "/run/test/dev/vfio/vfio", Path: "/dev/vfio/vfio"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ns []node
			for _, d := range []pciDev{mlxPF, mlxVF0, tc.vf, mlxVF2unbound} {
				ns = append(ns, d.nodes()...)
			}
			root := buildTree(t, ns)
			links := &fakeLinks{vfs: map[string][]vfState{"ens2f0np0": {fresh, fresh, fresh}}}
			k := newFakePCI(t, root, nil)
			m, err := New(testLogger(t), root, nil, withLinks(links), WithDevRoot(tc.devRoot), withVfioOps(k.ops(&fakeNetdevs{tb: t, root: root})))
			if err != nil {
				t.Fatal(err)
			}
			pd, err := m.Setup(t.Context(), mlxVF1(t, root), &devicev1.DeviceConfig{Vfio: new(true)}, "")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, pd.GetDeviceNodes(), protocmp.Transform()); diff != "" {
				t.Errorf("device nodes (-want +got):\n%s", diff)
			}
			// Already on vfio-pci: nothing to bind, nothing for Free to
			// put back.
			if w := k.takeWrites(); len(w) > 0 || pd.GetVfioBinding() != nil {
				t.Errorf("a VF on vfio-pci was bound again: writes %q, vfio binding %v", w, pd.GetVfioBinding())
			}
			if len(links.reads)+len(links.calls) > 0 {
				t.Errorf("a config with no VF setting used the PF: reads %q, calls %q", links.reads, links.calls)
			}
		})
	}
}

// A vfio-bound VF whose IOMMU group sysfs does not show is refused before
// anything changes: no device node to give, no VF setting applied.
func TestSetup_VfioWithoutIOMMUGroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []node
	}{
		{name: "no iommu_group link"},
		{name: "a group that is not a number", extra: []node{{path: "kernel/iommu_groups/x"},
			{path: "devices/pci0000:5d/0000:5d:00.0/0000:5e:00.4/iommu_group", target: "kernel/iommu_groups/x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unbound := mlxVF2unbound
			unbound.driver = VfioDriver
			var ns []node
			for _, d := range []pciDev{mlxPF, mlxVF0, mlxVF1vfio, unbound} {
				ns = append(ns, d.nodes()...)
			}
			root := buildTree(t, append(ns, tc.extra...))
			links := &fakeLinks{vfs: map[string][]vfState{"ens2f0np0": {fresh, fresh, fresh}}}
			m := newTestManager(t, root, links)
			dev := &devicev1.Device{Name: "0000-5e-00-4", Manager: sriov, PciAddress: unbound.addr, PfName: "ens2f0np0",
				VfIndex: new(int32(2)), Driver: VfioDriver}
			_, err := m.Setup(t.Context(), dev, &devicev1.DeviceConfig{MacAddress: "02:aa:bb:cc:dd:ee"}, "")
			if !errors.Is(err, ErrNoIOMMUGroup) {
				t.Fatalf("Setup = %v, want ErrNoIOMMUGroup", err)
			}
			if len(links.calls) > 0 {
				t.Errorf("Setup changed the VF: %q", links.calls)
			}
		})
	}
}

// vfio in the claim config: true on a VF with a netdev (Setup binds it to
// vfio-pci) with nothing only a netdev takes; false refused on a VF bound
// to vfio-pci. A refusal is an error naming the field, found before
// anything changes.
func TestValidate_Vfio(t *testing.T) {
	root := fixtureTree(t)
	m := newTestManager(t, root, newFake())
	for _, tc := range []struct {
		name      string
		dev       *devicev1.Device
		vfio      bool
		mtu       uint32
		wantField string
	}{
		{name: "vfio on a vfio-bound VF", dev: vfio, vfio: true},
		{name: "no vfio on a netdev VF", dev: vf1, vfio: false},
		{name: "vfio on a netdev VF", dev: vf1, vfio: true},
		{name: "vfio and an MTU on a netdev VF", dev: vf1, vfio: true, mtu: 1400, wantField: "config.mtu"},
		{name: "no vfio on a vfio-bound VF", dev: vfio, vfio: false, wantField: "config.vfio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Validate(tc.dev, &devicev1.DeviceConfig{Vfio: new(tc.vfio), Mtu: tc.mtu})
			var fe *fielderr.Error
			switch {
			case tc.wantField == "" && err != nil:
				t.Fatalf("Validate = %v", err)
			case tc.wantField != "" && (!errors.As(err, &fe) || fe.Field != tc.wantField):
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.wantField)
			}
		})
	}
}

// A VF claimed as a netdev that has none, with a kernel driver bound, is
// not ready yet (its driver registers one: igbvf does so again after a
// reset), for the caller to retry; one claimed for vfio, or with no driver
// or a userspace one, which never has a netdev, is ready.
func TestNotReady(t *testing.T) {
	for _, tc := range []struct {
		driver, ifName string
		vfio, notReady bool
	}{
		{driver: "mlx5_core", notReady: true},
		{driver: "mlx5_core", ifName: "ens2f0v2"},
		{driver: "mlx5_core", vfio: true},
		{driver: ""},
		{driver: "igb_uio"},
		{driver: VfioDriver},
	} {
		dev := &devicev1.Device{Name: "0000-5e-00-4", Manager: sriov, Driver: tc.driver, KernelIfName: tc.ifName}
		err := NotReady(dev, &devicev1.DeviceConfig{Vfio: new(tc.vfio)})
		if got := errors.Is(err, manager.ErrNotReady); got != tc.notReady || (err != nil) != tc.notReady {
			t.Errorf("NotReady(driver %q, netdev %q, vfio %v) = %v, want not ready: %v", tc.driver, tc.ifName, tc.vfio, err, tc.notReady)
		}
	}
}
