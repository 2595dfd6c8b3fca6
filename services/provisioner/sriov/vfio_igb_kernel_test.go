//go:build kernelrig

// Kernel-rig tests of DPDK mode on a real SR-IOV NIC: a VF of the igb
// machine's second 82576 PF (the first is igb_kernel_test.go's) moved
// from igbvf to vfio-pci by Setup and used through its vfio device nodes
// the way DPDK's EAL opens them, then moved back by Free with its netdev
// as it was, all read back from the kernel.
package sriov

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// The vfio ioctls (linux/vfio.h): _IO(VFIO_TYPE, VFIO_BASE + n), with
// VFIO_TYPE ';' and VFIO_BASE 100; _IO has no direction and no size bits.
const (
	vfioIoctlBase         = ';'<<8 | 100
	vfioGetAPIVersion     = vfioIoctlBase + 0
	vfioCheckExtension    = vfioIoctlBase + 1
	vfioSetIOMMU          = vfioIoctlBase + 2
	vfioGroupGetStatus    = vfioIoctlBase + 3
	vfioGroupSetContainer = vfioIoctlBase + 4
	vfioGroupGetDeviceFD  = vfioIoctlBase + 6
	vfioDeviceGetInfo     = vfioIoctlBase + 7

	vfioAPIVersion       = 0      // VFIO_API_VERSION
	vfioType1v2IOMMU     = 3      // VFIO_TYPE1v2_IOMMU
	vfioGroupFlagsViable = 1 << 0 // VFIO_GROUP_FLAGS_VIABLE
	vfioDeviceFlagsPCI   = 1 << 1 // VFIO_DEVICE_FLAGS_PCI
	vfioPCINumRegions    = 9      // VFIO_PCI_NUM_REGIONS: BARs 0-5, ROM, config, VGA
)

// vfioGroupStatus is struct vfio_group_status.
type vfioGroupStatus struct{ argsz, flags uint32 }

// vfioDeviceInfo is struct vfio_device_info.
type vfioDeviceInfo struct{ argsz, flags, numRegions, numIRQs, capOffset, pad uint32 }

// vfioIoctl is an ioctl whose argument is a pointer (converted to uintptr
// in the Syscall call itself, which keeps the object alive and in place).
func vfioIoctl(fd int, req uintptr, arg unsafe.Pointer) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// vfioIoctlInt is an ioctl whose argument is a number.
func vfioIoctlInt(fd int, req, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// specNodes returns the device nodes of the CDI spec dra writes for a
// claim with the prepared device pd: what the container runtime gives the
// pod's containers, the nodes DPDK then opens.
func specNodes(t *testing.T, pd *devicev1.PreparedDevice) []*devicev1.DeviceNode {
	t.Helper()
	spec, _, err := cdispec.Build("7c1a2b3c-0000-4000-8000-000000000001", []cdispec.Device{
		{Request: "dpdk", Name: pd.GetDevice().GetName(), Prepared: pd}})
	if err != nil || spec == nil || len(spec.Devices) != 1 {
		t.Fatalf("CDI spec of the vfio VF: %v, %v", spec, err)
	}
	var nodes []*devicev1.DeviceNode
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		if n.Type != "c" {
			t.Errorf("CDI device node %s of type %q, want c", n.Path, n.Type)
		}
		nodes = append(nodes, &devicev1.DeviceNode{HostPath: n.HostPath, Path: n.Path})
	}
	if diff := cmp.Diff(pd.GetDeviceNodes(), nodes, protocmp.Transform()); diff != "" {
		t.Errorf("CDI spec's device nodes (-prepared +spec):\n%s", diff)
	}
	return nodes
}

// openVfio does with the device nodes the CDI spec names what DPDK's EAL
// does to take a vfio-pci device: the container (API version, type1v2
// IOMMU), the group (viable) put in the container with that IOMMU, and the
// device's fd from the group by PCI address, whose info says a PCI device.
// It returns the fds it opened, device last, for the caller to close.
func openVfio(t *testing.T, nodes []*devicev1.DeviceNode, addr string) []int {
	t.Helper()
	if len(nodes) != 2 {
		t.Fatalf("device nodes %v, want the group's and the container's", nodes)
	}
	group, container := nodes[0].GetHostPath(), nodes[1].GetHostPath()
	var fds []int
	open := func(path string) int {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(fds)
			t.Fatalf("opening %s: %v", path, err)
		}
		fds = append(fds, fd)
		return fd
	}
	must := func(what string) func(int, error) int {
		return func(r int, err error) int {
			t.Helper()
			if err != nil {
				closeAll(fds)
				t.Fatalf("%s: %v", what, err)
			}
			return r
		}
	}
	cfd := open(container)
	if v := must("VFIO_GET_API_VERSION")(vfioIoctlInt(cfd, vfioGetAPIVersion, 0)); v != vfioAPIVersion {
		closeAll(fds)
		t.Fatalf("VFIO_GET_API_VERSION = %d, want %d", v, vfioAPIVersion)
	}
	if ok := must("VFIO_CHECK_EXTENSION(TYPE1v2)")(vfioIoctlInt(cfd, vfioCheckExtension, vfioType1v2IOMMU)); ok != 1 {
		closeAll(fds)
		t.Fatalf("VFIO_CHECK_EXTENSION(VFIO_TYPE1v2_IOMMU) = %d: no type1v2 IOMMU", ok)
	}
	gfd := open(group)
	st := vfioGroupStatus{argsz: uint32(unsafe.Sizeof(vfioGroupStatus{}))}
	must("VFIO_GROUP_GET_STATUS")(vfioIoctl(gfd, vfioGroupGetStatus, unsafe.Pointer(&st)))
	if st.flags&vfioGroupFlagsViable == 0 {
		closeAll(fds)
		t.Fatalf("group %s is not viable (flags %#x): a device of it is on a host driver", group, st.flags)
	}
	c := int32(cfd)
	must("VFIO_GROUP_SET_CONTAINER")(vfioIoctl(gfd, vfioGroupSetContainer, unsafe.Pointer(&c)))
	must("VFIO_SET_IOMMU(TYPE1v2)")(vfioIoctlInt(cfd, vfioSetIOMMU, vfioType1v2IOMMU))
	name, err := unix.BytePtrFromString(addr)
	if err != nil {
		t.Fatal(err)
	}
	dfd := must("VFIO_GROUP_GET_DEVICE_FD(" + addr + ")")(vfioIoctl(gfd, vfioGroupGetDeviceFD, unsafe.Pointer(name)))
	fds = append(fds, dfd)
	info := vfioDeviceInfo{argsz: uint32(unsafe.Sizeof(vfioDeviceInfo{}))}
	must("VFIO_DEVICE_GET_INFO")(vfioIoctl(dfd, vfioDeviceGetInfo, unsafe.Pointer(&info)))
	if info.flags&vfioDeviceFlagsPCI == 0 || info.numRegions < vfioPCINumRegions {
		closeAll(fds)
		t.Fatalf("VFIO_DEVICE_GET_INFO: flags %#x, %d regions: not a vfio-pci device", info.flags, info.numRegions)
	}
	t.Logf("vfio: API %d, type1v2 IOMMU, group %s viable (flags %#x), device %s fd %d: flags %#x, %d regions, %d IRQ types",
		vfioAPIVersion, group, st.flags, addr, dfd, info.flags, info.numRegions, info.numIRQs)
	return fds
}

// closeAll closes fds, last first (the device before its group and
// container).
func closeAll(fds []int) {
	for i := len(fds) - 1; i >= 0; i-- {
		unix.Close(fds[i])
	}
}

// netdevIdentity is a link's identity as the kernel has it.
func netdevIdentity(t *testing.T, name string) *devicev1.LinkSnapshot {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	a := l.Attrs()
	return &devicev1.LinkSnapshot{Name: a.Name, MacAddress: a.HardwareAddr.String(), Mtu: uint32(a.MTU), Up: a.Flags&net.FlagUp != 0}
}

// giveIdentity renames the VF netdev name and gives it a MAC, an MTU and
// the admin state up, so that what Free restores is none of the driver's
// defaults.
func giveIdentity(t *testing.T, name string, want *devicev1.LinkSnapshot) {
	t.Helper()
	if err := (netlinkNetdevs{}).SetIdentity(name, want); err != nil {
		t.Fatalf("giving %s the identity %v: %v", name, want, err)
	}
	if diff := cmp.Diff(want, netdevIdentity(t, want.GetName()), protocmp.Transform()); diff != "" {
		t.Fatalf("%s (-want +got):\n%s", want.GetName(), diff)
	}
}

// TestIGB_Vfio: a VF on igbvf whose claim asks for vfio is bound to
// vfio-pci by Setup, alone in its IOMMU group, with the group's device
// nodes; DPDK's way of opening them works; Free puts the VF back on igbvf
// with its netdev's name, MAC, MTU and admin state, and a second Free
// changes nothing. With VF settings in the claim, they are made on the PF
// and put back by Free before the VF goes back to its driver. A Free that
// stopped half way (the VF unbound, no driver) is finished by the next.
func TestIGB_Vfio(t *testing.T) {
	kernelrig.Require(t)
	pf := igbPFs(t)[1]
	setNumVFs(t, pf, 0)
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(pf.dev(), "sriov_numvfs"), []byte("0"), 0); err != nil {
			t.Errorf("sriov_numvfs 0 on %s: %v", pf.netdev, err)
		}
	})
	setNumVFs(t, pf, 2)
	m := igbManager(t, pf)
	for _, tc := range []struct {
		name string
		i    int // the VF
		cfg  *devicev1.DeviceConfig
		// vf edits the PF's view of the VF before Setup into the one
		// after.
		vf func(v *vfView)
		// halfFreed: a Free that stopped after unbinding the VF from
		// vfio-pci (override cleared, no probe yet).
		halfFreed bool
	}{
		{name: "vfio only", i: 0, cfg: &devicev1.DeviceConfig{Vfio: new(true)}},
		{name: "vfio with VF settings", i: 1,
			cfg: &devicev1.DeviceConfig{Vfio: new(true), Vlan: new(uint32(100)), MacAddress: "02:4e:44:00:77:aa"},
			vf:  func(v *vfView) { v.Vlan, v.MAC = 100, "02:4e:44:00:77:aa" }},
		{name: "Free after a Free that stopped half way", i: 0, cfg: &devicev1.DeviceConfig{Vfio: new(true)}, halfFreed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := tc.i
			orig := &devicev1.LinkSnapshot{Name: fmt.Sprintf("dpdkvf%d", i), MacAddress: fmt.Sprintf("02:4e:44:00:77:%02x", i), Mtu: 1400, Up: true}
			vfDir := filepath.Join(pf.dev(), fmt.Sprintf("virtfn%d", i))
			netdev, err := firstEntry(filepath.Join(vfDir, "net"))
			if err != nil || netdev == "" {
				t.Fatalf("VF %d has no netdev: %v", i, err)
			}
			giveIdentity(t, netdev, orig)
			dev := discoverVFs(t, pf)[i]
			if dev.GetDriver() != igbVFDriver || dev.GetKernelIfName() != orig.GetName() {
				t.Fatalf("VF %d before Setup: %v", i, dev)
			}
			pfBefore := kernelVF(t, pf.netdev, i)

			t0 := time.Now()
			pd, err := m.Setup(t.Context(), dev, tc.cfg, "")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			t.Logf("Setup bound %s to vfio-pci in %v", dev.GetPciAddress(), time.Since(t0).Round(time.Millisecond))
			if d, _ := linkBase(filepath.Join(vfDir, "driver")); d != VfioDriver {
				t.Fatalf("VF driver %q after Setup, want %s", d, VfioDriver)
			}
			group, err := linkBase(filepath.Join(vfDir, "iommu_group"))
			if err != nil || group == "" {
				t.Fatalf("VF iommu_group after Setup: %q, %v", group, err)
			}
			members, _ := os.ReadDir(filepath.Join(vfDir, "iommu_group", "devices"))
			t.Logf("IOMMU group %s: %d device(s)", group, len(members))
			want := &devicev1.PreparedDevice{
				Device: discoverVFs(t, pf)[i],
				DeviceNodes: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/" + group, Path: "/dev/vfio/" + group},
					{HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}},
				VfioBinding: &devicev1.VfioBinding{OriginalDriver: igbVFDriver, OriginalNetdev: orig},
			}
			if pd.OriginalVf != nil {
				want.OriginalVf = pd.OriginalVf
			}
			if diff := cmp.Diff(want, pd, protocmp.Transform()); diff != "" {
				t.Errorf("prepared device (-want +discovered after Setup):\n%s", diff)
			}
			wantPF := pfBefore
			if tc.vf != nil {
				tc.vf(&wantPF)
			}
			if diff := cmp.Diff(wantPF, kernelVF(t, pf.netdev, i)); diff != "" {
				t.Errorf("VF on the PF after Setup (-want +got):\n%s", diff)
			}

			closeAll(openVfio(t, specNodes(t, pd), dev.GetPciAddress()))
			if tc.halfFreed {
				for _, w := range []struct{ file, value string }{
					{"driver_override", "\n"}, {"driver/unbind", dev.GetPciAddress()}} {
					if err := os.WriteFile(filepath.Join(vfDir, w.file), []byte(w.value), 0); err != nil {
						t.Fatalf("%s: %v", w.file, err)
					}
				}
				if d, _ := linkBase(filepath.Join(vfDir, "driver")); d != "" {
					t.Fatalf("VF on %q after an unbind", d)
				}
			}

			t0 = time.Now()
			if err := m.Free(t.Context(), pd); err != nil {
				t.Fatalf("Free: %v", err)
			}
			t.Logf("Free bound %s back to igbvf in %v", dev.GetPciAddress(), time.Since(t0).Round(time.Millisecond))
			if d, _ := linkBase(filepath.Join(vfDir, "driver")); d != igbVFDriver {
				t.Fatalf("VF driver %q after Free, want %s", d, igbVFDriver)
			}
			if o, _ := readString(filepath.Join(vfDir, "driver_override")); o != noOverride {
				t.Errorf("driver_override %q after Free, want none", o)
			}
			if n, _ := firstEntry(filepath.Join(vfDir, "net")); n != orig.GetName() {
				t.Errorf("VF netdev %q after Free, want %s", n, orig.GetName())
			}
			if diff := cmp.Diff(orig, netdevIdentity(t, orig.GetName()), protocmp.Transform()); diff != "" {
				t.Errorf("VF netdev after Free (-before Setup +after Free):\n%s", diff)
			}
			if diff := cmp.Diff(pfBefore, kernelVF(t, pf.netdev, i)); diff != "" {
				t.Errorf("VF on the PF after Free (-before Setup +after Free):\n%s", diff)
			}
			idx := linkIndexes(t, []string{orig.GetName()})

			if err := m.Free(t.Context(), pd); err != nil {
				t.Fatalf("second Free: %v", err)
			}
			if diff := cmp.Diff(idx, linkIndexes(t, []string{orig.GetName()})); diff != "" {
				t.Errorf("second Free re-created the netdev (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(orig, netdevIdentity(t, orig.GetName()), protocmp.Transform()); diff != "" {
				t.Errorf("VF netdev after a second Free (-before Setup +after):\n%s", diff)
			}
		})
	}
}
