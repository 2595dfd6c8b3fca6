package agreement_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/services/provisioner/subif"
	"github.com/netdra/netdra/services/state/store"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

var nodeConfigSeeds = []string{
	`{}`, `null`, `[]`,
	`{"driverName":"net.example.com","draRegistrationRetryInterval":2,"draRegistrationTimeout":5,"draRegistrationMaxAttempts":10,
	  "pools":[{"name":"sriov-pool","filter":{"deviceManagers":["sr-iov"],"pfNames":["ens1f0"],"pciAddrs":["0000:03:00.1"],
	    "vendorIDs":["0x8086"],"deviceIDs":["0x1889"],"drivers":["iavf"],"ifNames":["0000-03-00-1"],"parentIfNames":["ens1f0"]}},
	    {"name":"dummies","filter":{"deviceManagers":["dummy"],"ifNames":["dummy0"]}},{"name":"host","keepEbpfPrograms":true}],
	  "deviceManagerConfigs":{"sriov":{"enabled":true,"sysBusPCIDevPath":"/host/sys/bus/pci/devices","ifaces":[{"ifName":"ens1f0","vfCount":4}]},
	    "dummy":{"enabled":true,"count":3},"host":{"enabled":true,"ifNames":["eth*"],"drivers":["virtio_net"],"vendorIDs":["0x1af4"],"deviceIDs":["0x1041"]}},
	  "ipPools":[{"name":"v4","subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.99","gateway":"10.0.0.1",
	    "routes":[{"destination":"0.0.0.0/0"}],"exclude":["10.0.0.16/30"]},{"name":"v6","subnet":"fd00::/64"}],
	  "sysfsRoot":"/host/sys"}`,
	`{"deviceManagerConfigs":{"host":{"enabled":true,"ifNames":["averylonginterfacename"]}}}`,
	`{"pools":[{"name":"subs","filter":{"deviceManagers":["subif"],"parentIfNames":["eth1"]}}],
	  "deviceManagerConfigs":{"subif":{"enabled":true,"parents":[{"name":"mv","parentIfName":"eth1","kind":"macvlan","mode":"passthru","count":1},
	    {"name":"ipv","parentIfName":"eth3","kind":"ipvlan","mode":"l3s","count":1024,"allowDefaultRoute":true},
	    {"name":"v100","parentIfName":"eth1.100","kind":"vlan","count":2,"vlanId":100},{"name":"vany","parentIfName":"eth2","kind":"vlan"}]}}}`,
	`{"deviceManagerConfigs":{"subif":{"enabled":true,"parents":[{"name":"x","parentIfName":"e","kind":"vlan","mode":"l2"}]}}}`,
	`{"deviceManagerConfigs":{"sriov":{"enabled":true,"sysBusPCIDevPath":"/sys/../sys/bus/pci/devices"}}}`,
	`{"sysfsRoot":"/host//sys/"}`,
	`{"ipPools":[{"name":"a","subnet":"10.0.0.7/32","gateway":"10.0.0.7"}]}`,
	`{"pools":[{"name":"a","filter":{"ifNames":["x"]}},{"name":"b","filter":{"ifNames":["x"]}}]}`,
	`{"pools":[{"name":"a","multusResourceName":"intel.com/intel_sriov_netdevice"},{"name":"b","multusResourceName":"a.b/c/d"}]}`,
}

// FuzzNodeConfig decodes any bytes as a NodeConfig spec: when Validate
// accepts it, what dra derives from it is accepted by the services it goes
// to, the provisioner's managers (Configure) and the state's address
// pools (ReplaceIPPools). A spec that Validate accepts and the node
// refuses is Accepted and never Applied.
func FuzzNodeConfig(f *testing.F) {
	for _, s := range nodeConfigSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec v1alpha1.NodeConfigSpec
		if json.Unmarshal(raw, &spec) != nil || v1alpha1.Validate(&spec) != nil {
			return
		}
		b, err := json.Marshal(&spec)
		if err != nil {
			t.Fatal(err)
		}
		checkNode(t, &spec, b)
	})
}

// checkNode: what dra sends the provisioner and the state service for
// spec, they take (the sysfs root's existence aside: that is the node's).
func checkNode(t *testing.T, spec *v1alpha1.NodeConfigSpec, b []byte) {
	t.Helper()
	req := nodeconfig.Provisioner(spec)
	if r := req.GetSysfsRoot(); r != "" && (!filepath.IsAbs(r) || filepath.Clean(r) != r) {
		t.Fatalf("spec %s: the provisioner refuses sysfsRoot %q: not a clean absolute path", b, r)
	}
	m := req.GetManagers()
	if m.GetSriov().GetEnabled() {
		if err := sriov.ValidateConfig(m.GetSriov()); err != nil {
			t.Fatalf("spec %s: the provisioner refuses the sr-iov config: %v", b, err)
		}
	}
	if m.GetDummy().GetEnabled() {
		if _, err := dummy.New(nil, m.GetDummy()); err != nil {
			t.Fatalf("spec %s: the provisioner refuses the dummy config: %v", b, err)
		}
	}
	if m.GetHost().GetEnabled() {
		if _, err := hostdev.New(nil, "", m.GetHost()); err != nil {
			t.Fatalf("spec %s: the provisioner refuses the host config: %v", b, err)
		}
	}
	if m.GetSubif().GetEnabled() {
		if _, err := subif.New(nil, m.GetSubif()); err != nil {
			t.Fatalf("spec %s: the provisioner refuses the subif config: %v", b, err)
		}
	}
	if _, err := store.ValidatePools(nodeconfig.IPPools(spec).GetPools()); err != nil {
		t.Fatalf("spec %s: the state service refuses the ip pools: %v", b, err)
	}
}
