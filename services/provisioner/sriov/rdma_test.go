package sriov

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/rdma"
)

// mlxVF0RDMA is the fixture's mlx5 VF with its RDMA device, mlx5_2, as
// the kernel lays it out: the device under the VF's PCI function, its
// uverbs and umad/issm character devices and the shared rdma_cm.
func mlxVF0RDMA() []node {
	dir := "devices/" + mlxVF0.parent + "/" + mlxVF0.addr
	return []node{
		{path: dir + "/infiniband/mlx5_2/node_type", file: "1: CA"},
		{path: "class/infiniband/mlx5_2", target: dir + "/infiniband/mlx5_2"},
		{path: dir + "/infiniband_verbs/uverbs2/ibdev", file: "mlx5_2"},
		{path: "class/infiniband_verbs/uverbs2", target: dir + "/infiniband_verbs/uverbs2"},
		{path: "class/infiniband_verbs/abi_version", file: "6"},
		{path: dir + "/infiniband_mad/umad2/ibdev", file: "mlx5_2"},
		{path: dir + "/infiniband_mad/issm2/ibdev", file: "mlx5_2"},
		{path: "class/infiniband_mad/umad2", target: dir + "/infiniband_mad/umad2"},
		{path: "class/infiniband_mad/issm2", target: dir + "/infiniband_mad/issm2"},
		{path: "devices/virtual/misc/rdma_cm/dev", file: "10:58"},
		{path: "class/misc/rdma_cm", target: "devices/virtual/misc/rdma_cm"},
	}
}

// TestDiscover_RDMA: a VF with a netdev has the RDMA device of its PCI
// function; the others (no RDMA device, bound to vfio-pci) have none.
func TestDiscover_RDMA(t *testing.T) {
	root := fixtureTree(t, mlxVF0RDMA()...)
	devs, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range devs {
		got[d.GetPciAddress()] = d.GetRdmaDevice()
	}
	want := map[string]string{"0000:03:02.0": "", "0000:03:02.1": "", mlxVF0.addr: "mlx5_2", mlxVF1vfio.addr: "", mlxVF2unbound.addr: ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RDMA devices by VF (-want +got):\n%s", diff)
	}
}

// TestSetup_RDMADeviceNodes: Setup of a VF with an RDMA device gives its
// character devices under the device root, at /dev/infiniband in the
// container, and touches no PF for a config with no VF setting.
func TestSetup_RDMADeviceNodes(t *testing.T) {
	root := fixtureTree(t, mlxVF0RDMA()...)
	links := &fakeLinks{vfs: map[string][]vfState{"ens2f0np0": {fresh, fresh, fresh}},
		links: map[string]*devicev1.LinkSnapshot{"ens2f0v0": {Name: "ens2f0v0", MacAddress: mlxVF0.mac, Mtu: 1500}}}
	m, err := New(testLogger(t), root, nil, withLinks(links), WithDevRoot("/run/test/dev"))
	if err != nil {
		t.Fatal(err)
	}
	dev := discovered(t, root, mlxVF0.addr)
	pd, err := m.Setup(t.Context(), dev, &devicev1.DeviceConfig{PodIfName: "net1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var want []*devicev1.DeviceNode
	for _, n := range []string{"issm2", "rdma_cm", "umad2", "uverbs2"} {
		want = append(want, &devicev1.DeviceNode{HostPath: "/run/test/dev/infiniband/" + n, Path: "/dev/infiniband/" + n})
	}
	if diff := cmp.Diff(want, pd.GetDeviceNodes(), protocmp.Transform()); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}
	if pd.GetDevice().GetRdmaDevice() != "mlx5_2" {
		t.Errorf("prepared device's RDMA device %q, want mlx5_2", pd.GetDevice().GetRdmaDevice())
	}
	if len(links.calls) > 0 {
		t.Errorf("a config with no VF setting changed the PF: %q", links.calls)
	}
}

// TestSetup_RDMADeviceGone: an RDMA device that left sysfs since discovery
// fails Setup before anything changes (no VF setting applied).
func TestSetup_RDMADeviceGone(t *testing.T) {
	root := fixtureTree(t, mlxVF0RDMA()...)
	dev := discovered(t, root, mlxVF0.addr)
	dev.RdmaDevice = "mlx5_7"
	links := &fakeLinks{vfs: map[string][]vfState{"ens2f0np0": {fresh, fresh, fresh}}}
	m, err := New(testLogger(t), root, nil, withLinks(links))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Setup(t.Context(), dev, &devicev1.DeviceConfig{Vlan: new(uint32(10))}, "")
	if !errors.Is(err, rdma.ErrNoDevice) {
		t.Fatalf("Setup: %v, want rdma.ErrNoDevice", err)
	}
	if len(links.calls) > 0 {
		t.Errorf("a refused Setup changed the PF: %q", links.calls)
	}
}

// discovered is the VF at addr as Discover finds it in root.
func discovered(t *testing.T, root, addr string) *devicev1.Device {
	t.Helper()
	devs, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.GetPciAddress() == addr {
			return d
		}
	}
	t.Fatalf("%s not discovered", addr)
	return nil
}
