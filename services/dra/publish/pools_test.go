package publish

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

var (
	vf0 = &devicev1.Device{Name: "0000-03-00-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, PfName: "ens1f0",
		KernelIfName: "ens1f0v0", VendorId: "0x8086", DeviceId: "0x154c", Driver: "iavf", PciAddress: "0000:03:00.1"}
	vf1 = &devicev1.Device{Name: "0000-03-00-2", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, PfName: "ens1f1",
		VendorId: "0x15b3", DeviceId: "0x101e", Driver: "vfio-pci", PciAddress: "0000:03:00.2"}
	dummy0 = &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "dummy0", Driver: "dummy"}
	eth1   = &devicev1.Device{Name: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "eth1", Driver: "veth"}
	all    = []*devicev1.Device{vf0, vf1, dummy0, eth1}
)

func alloc(pool, dev string) *statev1.Allocation {
	return &statev1.Allocation{Pool: pool, DeviceName: dev, ClaimUid: "c-" + dev}
}

// render shows pools as "name: dev,dev".
func render(ps []Pool) []string {
	var out []string
	for _, p := range ps {
		var names []string
		for _, d := range p.Devices {
			names = append(names, d.GetName())
		}
		out = append(out, fmt.Sprintf("%s: %s", p.Name, strings.Join(names, ",")))
	}
	return out
}

func TestAssign(t *testing.T) {
	for _, tt := range assignCases {
		t.Run(tt.name, tt.run)
	}
}

// assignCase is one case of TestAssign: the pools Assign makes of every
// test device by specs, with allocs pinning devices, and what it logs.
type assignCase struct {
	name    string
	specs   []Spec
	allocs  []*statev1.Allocation
	want    []string
	wantLog string
}

// assignCases are TestAssign's cases.
var assignCases = []assignCase{
	{
		name:  "filter by device manager",
		specs: []Spec{{Name: "vfs", Filter: Filter{DeviceManagers: []string{"sr-iov"}}}, {Name: "fake", Filter: Filter{DeviceManagers: []string{"dummy"}}}},
		want:  []string{"fake: dummy0", "vfs: 0000-03-00-1,0000-03-00-2"},
	}, {
		name:  "fields are ANDed",
		specs: []Spec{{Name: "intel", Filter: Filter{DeviceManagers: []string{"sr-iov"}, VendorIDs: []string{"8086"}}}},
		want:  []string{"intel: 0000-03-00-1"},
	}, {
		name:  "values within a field are ORed",
		specs: []Spec{{Name: "p", Filter: Filter{PFNames: []string{"ens1f0", "ens1f1"}}}},
		want:  []string{"p: 0000-03-00-1,0000-03-00-2"},
	}, {
		name:  "an empty filter matches every device",
		specs: []Spec{{Name: "everything"}},
		want:  []string{"everything: 0000-03-00-1,0000-03-00-2,dummy0,eth1"},
	}, {
		name:  "ifNames match the device name or the kernel name",
		specs: []Spec{{Name: "named", Filter: Filter{IfNames: []string{"ens1f0v0", "eth1"}}}},
		want:  []string{"named: 0000-03-00-1,eth1"},
	}, {
		name:  "globs, PCI addresses, device IDs, drivers and parents",
		specs: []Spec{{Name: "a", Filter: Filter{PCIAddrs: []string{"0000:03:00.*"}, DeviceIDs: []string{"0x101E"}, Drivers: []string{"vfio-*"}, ParentIfNames: []string{"ens1f1"}}}},
		want:  []string{"a: 0000-03-00-2"},
	}, {
		name:    "several matches: the alphabetically first pool, with an error",
		specs:   []Spec{{Name: "zeta"}, {Name: "alpha", Filter: Filter{DeviceManagers: []string{"dummy"}}}},
		want:    []string{"alpha: dummy0", "zeta: 0000-03-00-1,0000-03-00-2,eth1"},
		wantLog: "matches several pools",
	}, {
		name:    "an allocated device stays in its recorded pool",
		specs:   []Spec{{Name: "alpha"}, {Name: "zeta"}},
		allocs:  []*statev1.Allocation{alloc("zeta", "eth1")},
		want:    []string{"alpha: 0000-03-00-1,0000-03-00-2,dummy0", "zeta: eth1"},
		wantLog: "matches several pools",
	}, {
		name:   "a pinned pool that is no longer configured is still published",
		specs:  []Spec{{Name: "new"}},
		allocs: []*statev1.Allocation{alloc("old", "eth1")},
		want:   []string{"new: 0000-03-00-1,0000-03-00-2,dummy0", "old: eth1"},
	}, {
		name:    "allocations in different pools: not advertised",
		specs:   []Spec{{Name: "a"}, {Name: "b"}},
		allocs:  []*statev1.Allocation{alloc("a", "eth1"), alloc("b", "eth1")},
		want:    []string{"a: 0000-03-00-1,0000-03-00-2,dummy0", "b: "},
		wantLog: "several pools; not advertised",
	}, {
		name:  "empty pools are published",
		specs: []Spec{{Name: "none", Filter: Filter{Drivers: []string{"mlx5_core"}}}},
		want:  []string{"none: "},
	}, {
		name:  "a device no pool selects is not published",
		specs: []Spec{{Name: "hosts", Filter: Filter{DeviceManagers: []string{"host"}}}},
		want:  []string{"hosts: eth1"},
	},
}

// run assigns the devices and checks the pools and the log.
func (tt assignCase) run(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	got := render(Assign(log, tt.specs, all, tt.allocs))
	if diff := cmp.Diff(tt.want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if tt.wantLog != "" && !strings.Contains(logs.String(), tt.wantLog) {
		t.Errorf("log %q lacks %q", logs.String(), tt.wantLog)
	}
	if tt.wantLog == "" && strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("unexpected error logged: %s", logs.String())
	}
}
