package cdispec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// FuzzBuild: whatever the prepared devices (read back from a claim status
// at recovery), Build either refuses them or builds a spec that the CDI
// library, as the runtime reads it, accepts; every device with an ID is in
// the spec.
func FuzzBuild(f *testing.F) {
	f.Add(uid, "net", "vf0", "0000:03:00.1", "/dev/vfio/42", "/dev/vfio/42")
	f.Add(uid, "net/sub", "vf1", "", "/dev/vfio/vfio", "/dev/vfio/vfio")
	f.Add(uid, "", "dummy0", "", "", "")
	f.Add("not-a-uid", "net", "vf0", "0000:03:00.1", "dev/vfio/1", "../x")
	f.Add(uid, "a=b", "vf 0", "0000:03:00.1\n", "/dev/vfio/1", "/dev/vfio/1")
	f.Fuzz(func(t *testing.T, claimUID, request, name, pci, hostPath, path string) {
		pd := &devicev1.PreparedDevice{Device: &devicev1.Device{Name: name, PciAddress: pci}}
		if hostPath != "" || path != "" {
			pd.DeviceNodes = []*devicev1.DeviceNode{{HostPath: hostPath, Path: path}}
		}
		spec, ids, err := Build(claimUID, []Device{{Request: request, Name: name, Prepared: pd}})
		if err != nil || spec == nil {
			return
		}
		data, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		file := filepath.Join(t.TempDir(), "netdra.io-net_x.json")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		read, err := cdiapi.ReadSpec(file, 0)
		if err != nil {
			t.Fatalf("Build made a spec the runtime refuses: %v\n%s", err, data)
		}
		for dev, id := range ids {
			if read.GetDevice(id[len(Vendor+"/"+Class+"="):]) == nil {
				t.Errorf("device %s's ID %s is not in the spec", dev, id)
			}
		}
	})
}
