package cdispec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

func vfioVF(name, addr, group string) *devicev1.PreparedDevice {
	return &devicev1.PreparedDevice{
		Device: &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, PciAddress: addr, Driver: "vfio-pci"},
		DeviceNodes: []*devicev1.DeviceNode{{HostPath: "/dev/vfio/" + group, Path: "/dev/vfio/" + group},
			{HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}},
	}
}

func netdevVF(name, addr string) *devicev1.PreparedDevice {
	return &devicev1.PreparedDevice{Device: &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		PciAddress: addr, KernelIfName: "ens1f0v0"}}
}

func dummy(name string) *devicev1.PreparedDevice {
	return &devicev1.PreparedDevice{Device: &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: name}}
}

const uid = "6c8f1e1e-2f0e-4d7a-9b1a-0a0b0c0d0e0f"

// A claim with two vfio VFs in one request, a netdev VF in another and a
// dummy: each PCI function gets a CDI device with its request's variable
// (all the request's addresses, in allocation order), the vfio VFs their
// device nodes; the dummy gets none.
func TestBuild(t *testing.T) {
	spec, ids, err := Build(uid, []Device{
		{Request: "dpdk", Name: "0000-03-02-1", Prepared: vfioVF("0000-03-02-1", "0000:03:02.1", "41")},
		{Request: "dpdk", Name: "0000-03-02-2", Prepared: vfioVF("0000-03-02-2", "0000:03:02.2", "42")},
		{Request: "kernel-net/fast", Name: "0000-03-02-3", Prepared: netdevVF("0000-03-02-3", "0000:03:02.3")},
		{Request: "dummy", Name: "dummy0", Prepared: dummy("dummy0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	dpdkEnv := []string{"PCIDEVICE_NETDRA_IO_DPDK=0000:03:02.1,0000:03:02.2"}
	want := &cdi.Spec{Version: spec.Version, Kind: "netdra.io/net", Devices: []cdi.Device{
		{Name: uid + "-0000-03-02-1", ContainerEdits: cdi.ContainerEdits{Env: dpdkEnv, DeviceNodes: []*cdi.DeviceNode{
			{Path: "/dev/vfio/41", HostPath: "/dev/vfio/41", Type: "c"}, {Path: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Type: "c"}}}},
		{Name: uid + "-0000-03-02-2", ContainerEdits: cdi.ContainerEdits{Env: dpdkEnv, DeviceNodes: []*cdi.DeviceNode{
			{Path: "/dev/vfio/42", HostPath: "/dev/vfio/42", Type: "c"}, {Path: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Type: "c"}}}},
		{Name: uid + "-0000-03-02-3", ContainerEdits: cdi.ContainerEdits{Env: []string{"PCIDEVICE_NETDRA_IO_KERNEL_NET=0000:03:02.3"}}},
	}}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	wantIDs := map[string]string{
		"0000-03-02-1": "netdra.io/net=" + uid + "-0000-03-02-1",
		"0000-03-02-2": "netdra.io/net=" + uid + "-0000-03-02-2",
		"0000-03-02-3": "netdra.io/net=" + uid + "-0000-03-02-3",
	}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("IDs (-want +got):\n%s", diff)
	}
	if spec.Version == "" {
		t.Error("no CDI version")
	}
}

func TestBuild_NothingToGive(t *testing.T) {
	spec, ids, err := Build(uid, []Device{{Request: "net", Name: "dummy0", Prepared: dummy("dummy0")}})
	if err != nil || spec != nil || len(ids) != 0 {
		t.Fatalf("Build = %v, %v, %v; want nothing", spec, ids, err)
	}
}

func TestBuild_BadUID(t *testing.T) {
	for _, bad := range []string{"", "../etc", "a/b", "a b"} {
		if _, _, err := Build(bad, []Device{{Request: "r", Name: "x", Prepared: netdevVF("x", "0000:03:02.3")}}); err == nil {
			t.Errorf("Build(%q) accepted the UID", bad)
		}
	}
}

func TestDir_WriteRemoveSweep(t *testing.T) {
	d := New(filepath.Join(t.TempDir(), "cdi"))
	devs := []Device{{Request: "dpdk", Name: "0000-03-02-1", Prepared: vfioVF("0000-03-02-1", "0000:03:02.1", "41")}}
	ids, err := d.Write(uid, devs)
	if err != nil {
		t.Fatal(err)
	}
	if ids["0000-03-02-1"] == "" {
		t.Fatalf("no CDI ID: %v", ids)
	}
	fi, err := os.Stat(d.File(uid))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("spec mode %v, want 0644", fi.Mode().Perm())
	}
	var got cdi.Spec
	data, _ := os.ReadFile(d.File(uid))
	if err := json.Unmarshal(data, &got); err != nil || got.Kind != Kind || len(got.Devices) != 1 {
		t.Fatalf("spec on disk: %v %s", err, data)
	}
	// Writing again replaces it; only the spec is left in the directory.
	if _, err := d.Write(uid, devs); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, d.Path()); !slices.Equal(names, []string{filepath.Base(d.File(uid))}) {
		t.Errorf("directory holds %q", names)
	}
	if err := d.Remove(uid); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(uid); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if names := dirNames(t, d.Path()); len(names) != 0 {
		t.Errorf("left after Remove: %q", names)
	}
}

// Sweep removes netdra's specs of claims not kept and the temporary files
// of interrupted writes, and nothing of anyone else.
func TestDir_Sweep(t *testing.T) {
	d := New(t.TempDir())
	const kept, stale = "11111111-aaaa", "22222222-bbbb"
	for _, u := range []string{kept, stale} {
		if _, err := d.Write(u, []Device{{Request: "r", Name: "vf", Prepared: netdevVF("vf", "0000:03:02.3")}}); err != nil {
			t.Fatal(err)
		}
	}
	others := []string{"netdra.io_metadata_" + stale + "_r.json", "vendor.com-gpu_x.json", "netdra.io-net_not a uid.json"}
	for _, n := range append(others, ".netdra.io-net_"+stale+".json.123.tmp") {
		if err := os.WriteFile(filepath.Join(d.Path(), n), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := d.Sweep(map[string]bool{kept: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{stale}) {
		t.Errorf("removed %q, want %q", removed, stale)
	}
	want := append([]string{filepath.Base(d.File(kept))}, others...)
	slices.Sort(want)
	if diff := cmp.Diff(want, dirNames(t, d.Path())); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
}

func TestEnvName(t *testing.T) {
	for req, want := range map[string]string{
		"vf": "PCIDEVICE_NETDRA_IO_VF", "dpdk-vf": "PCIDEVICE_NETDRA_IO_DPDK_VF", "net/fast.one": "PCIDEVICE_NETDRA_IO_NET",
	} {
		if got := EnvName(req); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", req, got, want)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// With the netns hook, every device with an interface (a dummy too) gets
// a CDI device whose createRuntime hook asks nri's gate and checks its pod
// interface name; a vfio VF (no interface) gets none; a bad name is
// refused.
func TestBuild_NetnsHook(t *testing.T) {
	dir := New(t.TempDir()).WithNetnsHook(Hook{Path: "/opt/netdra/bin/netdra-hook", GateSocket: "/run/netdra-gate/nri.sock"})
	ids, err := dir.Write(uid, []Device{
		{Request: "net", Name: "dummy0", Prepared: dummy("dummy0"), IfName: "net1"},
		{Request: "dpdk", Name: "vf0", Prepared: vfioVF("vf0", "0000:03:00.1", "42")},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dir.File(uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdi.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || len(spec.Devices) != 2 {
		t.Fatalf("ids %v, %d devices; want 2 and 2", ids, len(spec.Devices))
	}
	for _, d := range spec.Devices {
		hooks := d.ContainerEdits.Hooks
		switch d.Name {
		case uid + "-dummy0":
			want := []string{"netdra-hook", "check-netns", "-socket", "/run/netdra-gate/nri.sock", "-ifname", "net1"}
			if len(hooks) != 1 || hooks[0].HookName != "createRuntime" || hooks[0].Path != "/opt/netdra/bin/netdra-hook" || !slices.Equal(hooks[0].Args, want) {
				t.Errorf("dummy0's hooks: %+v, want one createRuntime hook with %v", hooks, want)
			}
		case uid + "-vf0":
			if len(hooks) != 0 {
				t.Errorf("vf0 (no interface) has hooks: %+v", hooks)
			}
		}
	}
	if _, err := dir.Write(uid, []Device{{Request: "net", Name: "d", Prepared: dummy("d"), IfName: "bad name"}}); err == nil {
		t.Error("a bad interface name was written into a hook")
	}
}

// WriteFile gives the file the mode asked for, replaces an existing one
// whole, and leaves no temporary file, whether it succeeded or not.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metadata.json")
	for _, data := range []string{`{"generation":1}`, `{"generation":2}`} {
		if err := WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("file holds %q (%v), want %q", got, err, data)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x.json"), []byte("x"), 0o644); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	if err := os.Mkdir(filepath.Join(dir, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "taken"), []byte("x"), 0o644); err == nil {
		t.Error("WriteFile over a directory succeeded")
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{"metadata.json", "taken"}) {
		t.Errorf("directory holds %q", names)
	}
}
