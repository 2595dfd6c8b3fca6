package rdma

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// tree builds a fake sysfs under t.TempDir() from files (path: content;
// "->target" makes a symlink, a trailing "/" a directory) and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case len(c) > 2 && c[:2] == "->":
			err = os.Symlink(c[2:], full)
		case p[len(p)-1] == '/':
			err = os.MkdirAll(full, 0o755)
		default:
			err = os.WriteFile(full, []byte(c), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The sysfs of a host with a ConnectX VF (mlx5_2 on 0000:03:00.2, netdev
// ens1f0v0), a soft-RoCE device rxe0 over veth0, and the character devices
// of both, as the kernel lays them out.
func hostTree(t *testing.T) string {
	return tree(t, map[string]string{
		"devices/pci0000:00/0000:03:00.2/infiniband/mlx5_2/":          "",
		"devices/pci0000:00/0000:03:00.2/net/ens1f0v0/":               "",
		"devices/virtual/infiniband/rxe0/parent":                      "veth0\n",
		"devices/virtual/net/veth0/":                                  "",
		"devices/virtual/net/veth1/":                                  "",
		"class/net/ens1f0v0":                                          "->../../devices/pci0000:00/0000:03:00.2/net/ens1f0v0",
		"class/net/veth0":                                             "->../../devices/virtual/net/veth0",
		"class/net/veth1":                                             "->../../devices/virtual/net/veth1",
		"devices/pci0000:00/0000:03:00.2/net/ens1f0v0/device":         "->../../../0000:03:00.2",
		"class/infiniband/mlx5_2":                                     "->../../devices/pci0000:00/0000:03:00.2/infiniband/mlx5_2",
		"class/infiniband/rxe0":                                       "->../../devices/virtual/infiniband/rxe0",
		"class/infiniband_verbs/abi_version":                          "6\n",
		"class/infiniband_verbs/uverbs0/ibdev":                        "rxe0\n",
		"class/infiniband_verbs/uverbs2/ibdev":                        "mlx5_2\n",
		"class/infiniband_mad/abi_version":                            "5\n",
		"class/infiniband_mad/umad0/ibdev":                            "rxe0\n",
		"class/infiniband_mad/issm0/ibdev":                            "rxe0\n",
		"class/infiniband_mad/umad1/ibdev":                            "mlx5_2\n",
		"class/infiniband_mad/issm1/ibdev":                            "mlx5_2\n",
		"class/misc/rdma_cm/dev":                                      "10:58\n",
		"devices/pci0000:00/0000:03:00.2/infiniband/mlx5_2/node_guid": "0000:0000:0000:0000\n",
	})
}

// TestForNetdev: a PCI function's RDMA device is found through its
// device/infiniband entry, a soft-RoCE device through its parent; an
// interface with none, or a name that is not one, has none.
func TestForNetdev(t *testing.T) {
	root := hostTree(t)
	for _, tc := range []struct{ ifName, want string }{
		{"ens1f0v0", "mlx5_2"},
		{"veth0", "rxe0"},
		{"veth1", ""},
		{"eth9", ""},
		{"", ""},
		{"../class", ""},
	} {
		if got := ForNetdev(root, tc.ifName); got != tc.want {
			t.Errorf("ForNetdev(%q) = %q, want %q", tc.ifName, got, tc.want)
		}
	}
	if got := InPCIDevice(filepath.Join(root, "devices/pci0000:00/0000:03:00.2")); got != "mlx5_2" {
		t.Errorf("InPCIDevice(0000:03:00.2) = %q, want mlx5_2", got)
	}
	if got := ForNetdev(t.TempDir(), "veth0"); got != "" {
		t.Errorf("ForNetdev in an empty sysfs = %q, want none", got)
	}
}

// TestDeviceNodes: each RDMA device gets its own uverbs, umad and issm
// nodes and the shared rdma_cm, under the device root, sorted; the class
// directories' abi_version files are not devices.
func TestDeviceNodes(t *testing.T) {
	root := hostTree(t)
	node := func(n string) *devicev1.DeviceNode {
		return &devicev1.DeviceNode{HostPath: "/host/dev/infiniband/" + n, Path: "/dev/infiniband/" + n}
	}
	for _, tc := range []struct {
		dev  string
		want []*devicev1.DeviceNode
	}{
		{"rxe0", []*devicev1.DeviceNode{node("issm0"), node("rdma_cm"), node("umad0"), node("uverbs0")}},
		{"mlx5_2", []*devicev1.DeviceNode{node("issm1"), node("rdma_cm"), node("umad1"), node("uverbs2")}},
	} {
		got, err := DeviceNodes(root, "/host/dev", tc.dev)
		if err != nil {
			t.Fatalf("DeviceNodes(%s): %v", tc.dev, err)
		}
		if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("DeviceNodes(%s) (-want +got):\n%s", tc.dev, diff)
		}
	}
}

// TestDeviceNodes_AsPresent: with only ib_core and ib_uverbs loaded (no
// infiniband_mad, no rdma_cm) the device gets its uverbs node alone; with
// no ib_uverbs either, none.
func TestDeviceNodes_AsPresent(t *testing.T) {
	root := tree(t, map[string]string{
		"class/infiniband/rxe0/parent":         "veth0\n",
		"class/infiniband_verbs/uverbs0/ibdev": "rxe0\n",
	})
	got, err := DeviceNodes(root, "/dev", "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	want := []*devicev1.DeviceNode{{HostPath: "/dev/infiniband/uverbs0", Path: "/dev/infiniband/uverbs0"}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	bare := tree(t, map[string]string{"class/infiniband/rxe0/parent": "veth0\n"})
	if got, err := DeviceNodes(bare, "/dev", "rxe0"); err != nil || len(got) != 0 {
		t.Errorf("without ib_uverbs: %v, %v; want no node", got, err)
	}
}

// TestDeviceNodes_Refused: a device gone from sysfs is ErrNoDevice, a name
// that is not one a field error, and an unreadable class directory an
// error, never a silently short list.
func TestDeviceNodes_Refused(t *testing.T) {
	root := hostTree(t)
	if _, err := DeviceNodes(root, "/dev", "mlx5_9"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("gone device: %v, want ErrNoDevice", err)
	}
	for _, name := range []string{"", "..", "a/b", "rxe 0", string(make([]byte, 64))} {
		if _, err := DeviceNodes(root, "/dev", name); !errors.Is(err, fielderr.ErrInvalid) {
			t.Errorf("DeviceNodes(%q): %v, want a field error", name, err)
		}
	}
	if os.Geteuid() == 0 {
		t.Skip("root reads a directory without permissions")
	}
	if err := os.Chmod(filepath.Join(root, "class", "infiniband_verbs"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "class", "infiniband_verbs"), 0o755) })
	if _, err := DeviceNodes(root, "/dev", "rxe0"); err == nil {
		t.Error("unreadable infiniband_verbs: no error")
	}
}

// TestValidateName names the field.
func TestValidateName(t *testing.T) {
	if err := ValidateName("device.rdmaDevice", "mlx5_0"); err != nil {
		t.Errorf("mlx5_0: %v", err)
	}
	err := ValidateName("device.rdmaDevice", "x/y")
	var fe *fielderr.Error
	if !errors.As(err, &fe) || fe.Field != "device.rdmaDevice" {
		t.Errorf("x/y: %v, want a field error naming device.rdmaDevice", err)
	}
}
