package driver

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/cdispec"
)

// vfioNodes are the device nodes the fake provisioner gives vf1, as if it
// were bound to vfio-pci in IOMMU group 41.
var vfioNodes = []*devicev1.DeviceNode{{HostPath: "/dev/vfio/41", Path: "/dev/vfio/41"}, {HostPath: "/dev/vfio/vfio", Path: "/dev/vfio/vfio"}}

// cdiRig is a rig whose driver writes CDI specs into a temporary
// directory and adds device metadata; vf1 is a vfio VF at 0000:03:02.1,
// vf2 a netdev VF at 0000:03:02.2.
func cdiRig(t *testing.T, rows ...*statev1.Allocation) (*rig, *cdispec.Dir) {
	t.Helper()
	r := newRig(t, rows...)
	dir := cdispec.New(t.TempDir())
	r.d.cdi, r.d.metadata = dir, true
	r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
		return &provisionerv1.SetupResponse{PreparedDevice: cdiPrepared(named(in))}, nil
	}
	return r, dir
}

func cdiPrepared(dev *devicev1.Device) *devicev1.PreparedDevice {
	pd := preparedOf(dev)
	switch dev.GetName() {
	case "vf1":
		pd.Device.PciAddress, pd.DeviceNodes = "0000:03:02.1", vfioNodes
	case "vf2":
		pd.Device.PciAddress = "0000:03:02.2"
	}
	return pd
}

func prepareResult(t *testing.T, r *rig, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := r.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatal(err)
	}
	r.d.statusWrites.Wait()
	return res[claim.UID]
}

// Prepare writes the claim's spec before its status and answers each PCI
// device's CDI device ID and metadata; preparing again writes the same
// spec and answers the same; unprepare removes the spec.
func TestPrepare_CDISpec(t *testing.T) {
	r, dir := cdiRig(t)
	write := r.claims.UpdateDeviceStatusFunc
	r.claims.UpdateDeviceStatusFunc = func(c *resourceapi.ResourceClaim, devs []resourceapi.AllocatedDeviceStatus) error {
		if _, err := os.Stat(dir.File(string(c.UID))); err != nil {
			t.Errorf("the status is written before the CDI spec: %v", err)
		}
		return write(c, devs)
	}
	res := prepareResult(t, r, twoVFs.build())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := map[string]string{"vf1": "netdra.io/net=uid-c1-vf1", "vf2": "netdra.io/net=uid-c1-vf2"}
	got := map[string]string{}
	for _, d := range res.Devices {
		if len(d.CDIDeviceIDs) == 1 {
			got[d.DeviceName] = d.CDIDeviceIDs[0]
		}
		md := d.Metadata
		if md == nil || md.Attributes["resource.kubernetes.io/pciBusID"].StringValue == nil {
			t.Errorf("device %s: metadata without its PCI address: %+v", d.DeviceName, md)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CDI device IDs (-want +got):\n%s", diff)
	}
	vf1 := res.Devices[0].Metadata
	if vf1.NetworkData == nil || vf1.NetworkData.InterfaceName != "net1" || vf1.Attributes["vlan"].IntValue == nil ||
		*vf1.Attributes["vlan"].IntValue != 100 || *vf1.Attributes["deviceNode0"].StringValue != "/dev/vfio/41" {
		t.Errorf("vf1's metadata: %+v %+v", vf1.Attributes, vf1.NetworkData)
	}
	spec, err := os.ReadFile(dir.File("uid-c1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir.File("uid-c1")); err != nil {
		t.Fatal(err)
	}
	spec2 := twoVFs
	spec2.status = r.claims.getWritten("uid-c1")
	again := prepareResult(t, r, spec2.build())
	if again.Err != nil {
		t.Fatal(again.Err)
	}
	if diff := cmp.Diff(res.Devices, again.Devices); diff != "" {
		t.Errorf("prepared again (-first +again):\n%s", diff)
	}
	if spec2, err := os.ReadFile(dir.File("uid-c1")); err != nil || string(spec2) != string(spec) {
		t.Errorf("spec written again: %v\n%s\nwant\n%s", err, spec2, spec)
	}
	if _, err := r.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{claimRef("c1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir.File("uid-c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spec after unprepare: %v", err)
	}
}

// A prepare that fails after the spec was written (the commit) removes
// the spec with the rest.
func TestPrepare_CDISpecRolledBack(t *testing.T) {
	r, dir := cdiRig(t)
	r.state.CommitPrepareFunc = func(*statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error) {
		return nil, status.Error(codes.Unavailable, "state service restarting")
	}
	if res := prepareResult(t, r, twoVFs.build()); res.Err == nil {
		t.Fatal("prepare succeeded")
	}
	if _, err := os.Stat(dir.File("uid-c1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spec after the rollback: %v", err)
	}
}

// Recover writes the spec of each prepared claim again (a reboot emptied
// the directory) and removes the specs of claims that are not prepared:
// one a crash left between the spec and the status, one being freed.
func TestRecover_CDISpecs(t *testing.T) {
	prepRow := row("c1", "web", "vf1", prepared, &devicev1.DeviceConfig{})
	prepRow.PreparedDevice = cdiPrepared(deviceByName("vf1"))
	freeing := row("c2", "api", "vf2", freeingFailed, nil)
	r, dir := cdiRig(t, prepRow, freeing)
	for _, uid := range []string{"uid-crashed", "uid-c2"} {
		if _, err := dir.Write(uid, []cdispec.Device{{Request: "net", Name: "vf3", Prepared: cdiPrepared(deviceByName("vf2"))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.d.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir.File("uid-c1")); err != nil {
		t.Errorf("the prepared claim's spec: %v", err)
	}
	for _, uid := range []string{"uid-crashed", "uid-c2"} {
		if _, err := os.Stat(dir.File(uid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("spec of %s after Recover: %v", uid, err)
		}
	}
}
