package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netdra/netdra/shared/fielderr"
)

func ptr[T any](v T) *T { return &v }

// validSpec sets every field.
func validSpec() *NodeConfigSpec {
	return &NodeConfigSpec{
		DriverName:                   "net.example.com",
		DRARegistrationRetryInterval: ptr[int32](2),
		DRARegistrationTimeout:       ptr[int32](5),
		DRARegistrationMaxAttempts:   ptr[int32](10),
		Pools: []Pool{
			{Name: "sriov-pool", Filter: &PoolFilter{
				DeviceManagers: []DeviceManager{DeviceManagerSRIOV},
				PFNames:        []string{"ens1f0"},
				PCIAddrs:       []string{"0000:03:00.1"},
				VendorIDs:      []string{"0x8086"},
				DeviceIDs:      []string{"0x1889"},
				Drivers:        []string{"iavf"},
				IfNames:        []string{"0000-03-00-1"},
				ParentIfNames:  []string{"ens1f0"},
			}, MultusResourceName: "intel.com/sriov_vf"},
			{Name: "dummies", Filter: &PoolFilter{DeviceManagers: []DeviceManager{DeviceManagerDummy}, IfNames: []string{"dummy0"}}},
			{Name: "everything"},
		},
		DeviceManagerConfigs: &DeviceManagerConfigs{
			SRIOV: &SRIOVConfig{Enabled: true, SysBusPCIDevPath: "/host/sys/bus/pci/devices",
				Ifaces: []SRIOVIface{{IfName: "ens1f0", VFCount: 4}, {IfName: "ens1f1"}}},
			Dummy: &DummyConfig{Enabled: true, Count: 3},
			Host:  &HostConfig{Enabled: true, IfNames: []string{"eth*"}, Drivers: []string{"virtio_net"}, VendorIDs: []string{"0x1af4"}, DeviceIDs: []string{"0x1041"}},
			Subif: &SubifConfig{Enabled: true, Parents: []SubifParent{
				{Name: "mv", ParentIfName: "eth1", Kind: SubifMacvlan, Mode: "private", Count: 8},
				{Name: "ipv", ParentIfName: "eth3", Kind: SubifIPvlan, Count: 4},
				{Name: "v100", ParentIfName: "eth2", Kind: SubifVLAN, Count: 2, VLANID: 100},
			}},
		},
		SysfsRoot: "/host/sys",
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(s *NodeConfigSpec)
		field  string // "" is valid
		reason string // a part of the reason
	}{
		{"valid", func(*NodeConfigSpec) {}, "", ""},
		{"empty", func(s *NodeConfigSpec) { *s = NodeConfigSpec{} }, "", ""},
		{"host disabled without selectors", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Host = &HostConfig{} }, "", ""},
		{"bad driver name", func(s *NodeConfigSpec) { s.DriverName = "Net_Driver" }, "driverName", "not a DNS subdomain"},
		{"long driver name", func(s *NodeConfigSpec) { s.DriverName = strings.Repeat("a", 64) }, "driverName", "longer than 63"},
		{"zero retry interval", func(s *NodeConfigSpec) { s.DRARegistrationRetryInterval = ptr[int32](0) }, "draRegistrationRetryInterval", "out of range 1..3600"},
		{"negative timeout", func(s *NodeConfigSpec) { s.DRARegistrationTimeout = ptr[int32](-1) }, "draRegistrationTimeout", "out of range"},
		{"too many attempts", func(s *NodeConfigSpec) { s.DRARegistrationMaxAttempts = ptr[int32](1001) }, "draRegistrationMaxAttempts", "out of range 1..1000"},
		{"duplicate pool names", func(s *NodeConfigSpec) { s.Pools[2].Name = "dummies" }, "pools[2].name", "pool names are unique"},
		{"unknown taint effect", func(s *NodeConfigSpec) { s.Pools[1].UnhealthyTaintEffect = "Sometimes" }, "pools[1].unhealthyTaintEffect", "not NoSchedule, NoExecute or None"},
		{"multus name without prefix", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "sriov_vf.a-1" }, "", ""},
		{"multus name with two slashes", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "a.com/b/c" }, "pools[1].multusResourceName", `"b/c" is not a name`},
		{"multus name with bad prefix", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "Intel.com/vf" }, "pools[1].multusResourceName", "not a DNS subdomain"},
		{"multus name ending in '_'", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "intel.com/vf_" }, "pools[1].multusResourceName", "starting and ending with a letter or digit"},
		{"multus name empty after prefix", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "intel.com/" }, "pools[1].multusResourceName", `"" is not a name`},
		{"long multus name", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "intel.com/" + strings.Repeat("v", 55) }, "pools[1].multusResourceName", "more than 64"},
		{"ip pool name with upper case", func(s *NodeConfigSpec) { s.Pools[1].IPPools = []string{"net-a", "Net-B"} }, "pools[1].ipPools[1]", `"Net-B" is not a pool name`},
		{"ip pool named twice", func(s *NodeConfigSpec) { s.Pools[0].IPPools = []string{"net-a", "net-a"} }, "pools[0].ipPools[1]", "listed twice"},
		{"too many ip pools", func(s *NodeConfigSpec) {
			for i := 0; i <= 32; i++ {
				s.Pools[0].IPPools = append(s.Pools[0].IPPools, fmt.Sprintf("p%d", i))
			}
		}, "pools[0].ipPools", "more than 32"},
		{"multus name of 64", func(s *NodeConfigSpec) { s.Pools[1].MultusResourceName = "intel.com/" + strings.Repeat("v", 54) }, "", ""},
		{"slash in pool name", func(s *NodeConfigSpec) { s.Pools[1].Name = "a/b" }, "pools[1].name", "contains '/'"},
		{"empty pool name", func(s *NodeConfigSpec) { s.Pools[1].Name = "" }, "pools[1].name", "required"},
		{"upper-case pool name", func(s *NodeConfigSpec) { s.Pools[0].Name = "Fast" }, "pools[0].name", "not a DNS subdomain"},
		{"too many pools", func(s *NodeConfigSpec) {
			for len(s.Pools) <= MaxPools {
				s.Pools = append(s.Pools, Pool{Name: "p" + strings.Repeat("x", len(s.Pools))})
			}
		}, "pools", "more than 32"},
		{"ifName in two pools", func(s *NodeConfigSpec) { s.Pools[1].Filter.IfNames = []string{"dummy0", "0000-03-00-1"} }, "pools[1].filter.ifNames[1]", `already in pool "sriov-pool" (pools[0])`},
		{"duplicate ifName in a pool", func(s *NodeConfigSpec) { s.Pools[1].Filter.IfNames = []string{"dummy0", "dummy0"} }, "pools[1].filter.ifNames[1]", "already ifNames[0]"},
		{"unknown manager", func(s *NodeConfigSpec) { s.Pools[1].Filter.DeviceManagers = []DeviceManager{"macvlan"} }, "pools[1].filter.deviceManagers[0]", "not a device manager"},
		{"bad pf name", func(s *NodeConfigSpec) { s.Pools[0].Filter.PFNames = []string{"a/b"} }, "pools[0].filter.pfNames[0]", "contains"},
		{"long pf name", func(s *NodeConfigSpec) { s.Pools[0].Filter.PFNames = []string{strings.Repeat("e", 16)} }, "pools[0].filter.pfNames[0]", "longer than 15"},
		{"bad pci address", func(s *NodeConfigSpec) { s.Pools[0].Filter.PCIAddrs = []string{"03:00.1"} }, "pools[0].filter.pciAddrs[0]", "not a PCI address"},
		{"bad vendor id", func(s *NodeConfigSpec) { s.Pools[0].Filter.VendorIDs = []string{"8086"} }, "pools[0].filter.vendorIDs[0]", "hex ID"},
		{"bad device id", func(s *NodeConfigSpec) { s.Pools[0].Filter.DeviceIDs = []string{"0x18899"} }, "pools[0].filter.deviceIDs[0]", "hex ID"},
		{"driver with space", func(s *NodeConfigSpec) { s.Pools[0].Filter.Drivers = []string{"a b"} }, "pools[0].filter.drivers[0]", "whitespace"},
		{"reserved parent name", func(s *NodeConfigSpec) { s.Pools[0].Filter.ParentIfNames = []string{".."} }, "pools[0].filter.parentIfNames[0]", "not an interface name"},
		{"bad sysBusPCIDevPath", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.SRIOV.SysBusPCIDevPath = "sys/bus" }, "deviceManagerConfigs.sriov.sysBusPCIDevPath", "absolute"},
		{"bad sriov ifName", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.SRIOV.Ifaces[1].IfName = "" }, "deviceManagerConfigs.sriov.ifaces[1].ifName", "required"},
		{"duplicate sriov ifName", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.SRIOV.Ifaces[1].IfName = "ens1f0" }, "deviceManagerConfigs.sriov.ifaces[1].ifName", "already ifaces[0]"},
		{"negative vf count", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.SRIOV.Ifaces[0].VFCount = -1 }, "deviceManagerConfigs.sriov.ifaces[0].vfCount", "out of range 0..4096"},
		{"negative dummy count", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Dummy.Count = -1 }, "deviceManagerConfigs.dummy.count", "out of range 0..1024"},
		{"too many dummies", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Dummy.Count = 1025 }, "deviceManagerConfigs.dummy.count", "out of range"},
		{"host enabled without selectors", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Host = &HostConfig{Enabled: true} }, "deviceManagerConfigs.host.enabled", "never offers every interface"},
		{"bad host glob", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Host.IfNames = []string{"eth["} }, "deviceManagerConfigs.host.ifNames[0]", "not a valid glob"},
		{"host name longer than an interface name", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Host.IfNames = []string{"averylonginterfacename"} }, "deviceManagerConfigs.host.ifNames[0]", "longer than an interface name"},
		{"long host glob", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Host.IfNames = []string{"averylonginterfacename*"} }, "", ""},
		{"subif any vlan", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[2].VLANID = 0 }, "", ""},
		{"subif passthru alone", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[0] = SubifParent{Name: "pt", ParentIfName: "eth4", Kind: SubifMacvlan, Mode: "passthru", Count: 1}
		}, "", ""},
		{"subif no name", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[1].Name = "" }, "deviceManagerConfigs.subif.parents[1].name", "required"},
		{"subif upper-case name", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[1].Name = "IPv" }, "deviceManagerConfigs.subif.parents[1].name", "DNS label"},
		{"subif long name", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[1].Name = strings.Repeat("a", 59) }, "deviceManagerConfigs.subif.parents[1].name", "longer than 58"},
		{"subif duplicate name", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[2].Name = "mv" }, "deviceManagerConfigs.subif.parents[2].name", "names are unique"},
		{"subif bad parent", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].ParentIfName = "eth:1" }, "deviceManagerConfigs.subif.parents[0].parentIfName", "contains"},
		{"subif lo parent", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].ParentIfName = "lo" }, "deviceManagerConfigs.subif.parents[0].parentIfName", "cannot be a parent"},
		{"subif no parent", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].ParentIfName = "" }, "deviceManagerConfigs.subif.parents[0].parentIfName", "required"},
		{"subif no kind", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].Kind = "" }, "deviceManagerConfigs.subif.parents[0].kind", "required"},
		{"subif unknown kind", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].Kind = "veth" }, "deviceManagerConfigs.subif.parents[0].kind", "not a sub-interface kind"},
		{"subif ipvlan mode on macvlan", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].Mode = "l3" }, "deviceManagerConfigs.subif.parents[0].mode", "not a macvlan mode"},
		{"subif mode on vlan", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[2].Mode = "bridge" }, "deviceManagerConfigs.subif.parents[2].mode", "has no mode"},
		{"subif count", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].Count = 1025 }, "deviceManagerConfigs.subif.parents[0].count", "out of range 0..1024"},
		{"subif passthru count", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[0].Mode = "passthru"
		}, "deviceManagerConfigs.subif.parents[0].count", "count 1 at most"},
		{"subif vlanId on macvlan", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0].VLANID = 5 }, "deviceManagerConfigs.subif.parents[0].vlanId", "only a vlan"},
		{"subif vlanId range", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[2].VLANID = 4095 }, "deviceManagerConfigs.subif.parents[2].vlanId", "out of range 1..4094"},
		{"subif macvlan and ipvlan on one parent", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[1].ParentIfName = "eth1" }, "deviceManagerConfigs.subif.parents[1].kind", "not both"},
		{"subif ipvlan modes on one parent", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[0] = SubifParent{Name: "ip3", ParentIfName: "eth3", Kind: SubifIPvlan, Mode: "l3", Count: 1}
		}, "deviceManagerConfigs.subif.parents[1].mode", "same mode"},
		{"subif passthru with other macvlans", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[1] = SubifParent{Name: "pt", ParentIfName: "eth1", Kind: SubifMacvlan, Mode: "passthru", Count: 1}
		}, "deviceManagerConfigs.subif.parents[1].mode", "only one"},
		{"subif vlan beside a macvlan", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[2].ParentIfName = "eth1" }, "", ""},
		{"subif pool filter", func(s *NodeConfigSpec) {
			s.Pools[2].Filter = &PoolFilter{DeviceManagers: []DeviceManager{DeviceManagerSubif}, ParentIfNames: []string{"eth1"}}
		}, "", ""},
		{"subif shared by bandwidth", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("10G", "100M") }, "", ""},
		{"subif shared, whole by default", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("10G", "") }, "", ""},
		{"subif shared with a count", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("10G", "")
			s.DeviceManagerConfigs.Subif.Parents[0].Count = 4
		}, "deviceManagerConfigs.subif.parents[0].count", "its count 0"},
		{"subif shared with a counted name", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("10G", "")
			s.DeviceManagerConfigs.Subif.Parents[0].Name = "mv-1"
		}, "deviceManagerConfigs.subif.parents[0].name", "ends in -<digits>"},
		{"subif shared vlan", func(s *NodeConfigSpec) {
			s.DeviceManagerConfigs.Subif.Parents[2].Capacity = sharedParent("1G", "").Capacity
		}, "deviceManagerConfigs.subif.parents[2].capacity", "only macvlans"},
		{"subif shared bandwidth too small", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("100k", "") }, "deviceManagerConfigs.subif.parents[0].capacity.bandwidth", "not a bandwidth from 1M to 10T"},
		{"subif shared fractional bandwidth", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("1500m", "") }, "deviceManagerConfigs.subif.parents[0].capacity.bandwidth", "whole number"},
		{"subif shared default above the bandwidth", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.Subif.Parents[0] = sharedParent("1G", "2G") }, "deviceManagerConfigs.subif.parents[0].capacity.defaultRequest", "from 1M to 1G"},
		{"relative sysfs root", func(s *NodeConfigSpec) { s.SysfsRoot = "sys" }, "sysfsRoot", "absolute"},
		{"unclean sysfs root", func(s *NodeConfigSpec) { s.SysfsRoot = "/host//sys/" }, "sysfsRoot", "not a clean path; write /host/sys"},
		{"unclean sysBusPCIDevPath", func(s *NodeConfigSpec) { s.DeviceManagerConfigs.SRIOV.SysBusPCIDevPath = "/sys/../sys/bus/pci/devices" }, "deviceManagerConfigs.sriov.sysBusPCIDevPath", "not a clean path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.modify(s)
			err := Validate(s)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Validate: %v, want a *fielderr.Error", err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Reason, tt.reason) {
				t.Errorf("Validate: %v, want field %s and a reason containing %q", err, tt.field, tt.reason)
			}
		})
	}
}

func TestValidate_Nil(t *testing.T) {
	if err := Validate(nil); err != nil {
		t.Errorf("Validate(nil) = %v", err)
	}
}

func TestDefault(t *testing.T) {
	got := Default(&NodeConfigSpec{DRARegistrationTimeout: ptr[int32](7)})
	want := &NodeConfigSpec{
		DriverName:                   "netdra.io",
		DRARegistrationRetryInterval: ptr[int32](1),
		DRARegistrationTimeout:       ptr[int32](7),
		DRARegistrationMaxAttempts:   ptr[int32](10),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Default (-want +got):\n%s", diff)
	}
	if err := Validate(got); err != nil {
		t.Errorf("the defaults are not valid: %v", err)
	}
}

func TestDeepCopy(t *testing.T) {
	in := &ClusterConfig{Spec: ClusterConfigSpec{Spec: *validSpec()}}
	out := in.DeepCopy()
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("DeepCopy (-in +out):\n%s", diff)
	}
	out.Spec.Spec.Pools[0].Filter.IfNames[0] = "changed"
	*out.Spec.Spec.DRARegistrationTimeout = 99
	if in.Spec.Spec.Pools[0].Filter.IfNames[0] == "changed" || *in.Spec.Spec.DRARegistrationTimeout == 99 {
		t.Error("DeepCopy shares memory with its input")
	}
}

// sharedParent is a macvlan parent shared by bandwidth (defaultRequest
// unset when def is empty).
func sharedParent(bandwidth, def string) SubifParent {
	c := &SubifCapacity{Bandwidth: bandwidth, DefaultRequest: def}
	return SubifParent{Name: "mvs", ParentIfName: "eth1", Kind: SubifMacvlan, Capacity: c}
}
