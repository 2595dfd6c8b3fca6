package operatortest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/fielderr"
)

func ptr[T any](v T) *T { return &v }

// fullSpec sets every field.
func fullSpec() v1alpha1.NodeConfigSpec {
	return v1alpha1.NodeConfigSpec{
		DriverName:                   "net.example.com",
		DRARegistrationRetryInterval: ptr[int32](2),
		DRARegistrationTimeout:       ptr[int32](5),
		DRARegistrationMaxAttempts:   ptr[int32](10),
		Pools: []v1alpha1.Pool{
			{Name: "sriov-pool", Filter: &v1alpha1.PoolFilter{
				DeviceManagers: []v1alpha1.DeviceManager{v1alpha1.DeviceManagerSRIOV},
				PFNames:        []string{"ens1f0"},
				PCIAddrs:       []string{"0000:03:00.1"},
				VendorIDs:      []string{"0x8086"},
				DeviceIDs:      []string{"0x1889"},
				Drivers:        []string{"iavf"},
				IfNames:        []string{"0000-03-00-1"},
				ParentIfNames:  []string{"ens1f0"},
			}, MultusResourceName: "intel.com/intel_sriov_netdevice"},
			{Name: "dummies", Filter: &v1alpha1.PoolFilter{DeviceManagers: []v1alpha1.DeviceManager{v1alpha1.DeviceManagerDummy}, IfNames: []string{"dummy0"}}},
			{Name: "everything"},
		},
		DeviceManagerConfigs: &v1alpha1.DeviceManagerConfigs{
			SRIOV: &v1alpha1.SRIOVConfig{Enabled: true, SysBusPCIDevPath: "/host/sys/bus/pci/devices",
				Ifaces: []v1alpha1.SRIOVIface{{IfName: "ens1f0", VFCount: 4}, {IfName: "ens1f1"}}},
			Dummy: &v1alpha1.DummyConfig{Enabled: true, Count: 3},
			Host:  &v1alpha1.HostConfig{Enabled: true, IfNames: []string{"eth*"}, Drivers: []string{"virtio_net"}},
		},
		IPPools: []v1alpha1.IPPool{
			{Name: "v4", Subnet: "10.20.0.0/24", RangeStart: "10.20.0.10", RangeEnd: "10.20.0.99", Gateway: "10.20.0.1",
				Routes: []v1alpha1.IPPoolRoute{{Destination: "0.0.0.0/0"}}, Exclude: []string{"10.20.0.50", "10.20.0.64/28"}},
			{Name: "v6", Subnet: "fd00:20::/64", Gateway: "fd00:20::1", Routes: []v1alpha1.IPPoolRoute{{Destination: "fd00:30::/64", Gateway: "fd00:20::2"}}},
		},
		SysfsRoot: "/host/sys",
	}
}

// The apiserver rejects every kind of bad spec, in a NodeConfig and in a
// ClusterConfig's spec.spec, with a message naming the field; Validate
// rejects the same spec, naming the same field.
func TestCRD_RejectsBadSpecs(t *testing.T) {
	w := newWorld(t)
	tests := []struct {
		name   string
		modify func(s *v1alpha1.NodeConfigSpec)
		field  string // as Validate names it
		server string // a part of the apiserver's message; {p} is spec. or spec.spec.
	}{
		{"duplicate pool names", func(s *v1alpha1.NodeConfigSpec) { s.Pools[2].Name = "dummies" },
			"pools[2].name", `{p}pools[2]: Duplicate value: {"name":"dummies"}`},
		{"unknown taint effect", func(s *v1alpha1.NodeConfigSpec) { s.Pools[1].UnhealthyTaintEffect = "Sometimes" },
			"pools[1].unhealthyTaintEffect", `{p}pools[1].unhealthyTaintEffect: Unsupported value: "Sometimes": supported values: "NoSchedule", "NoExecute", "None"`},
		{"slash in a pool name", func(s *v1alpha1.NodeConfigSpec) { s.Pools[1].Name = "fast/net" },
			"pools[1].name", `{p}pools[1].name: Invalid value: "fast/net": a pool name must not contain '/'`},
		{"upper-case pool name", func(s *v1alpha1.NodeConfigSpec) { s.Pools[1].Name = "Fast" },
			"pools[1].name", `{p}pools[1].name: Invalid value: "Fast": a pool name must be a DNS subdomain: lower-case letters, digits, '-' and '.'`},
		{"negative dummy count", func(s *v1alpha1.NodeConfigSpec) { s.DeviceManagerConfigs.Dummy.Count = -1 },
			"deviceManagerConfigs.dummy.count", "{p}deviceManagerConfigs.dummy.count: Invalid value: -1: {p}deviceManagerConfigs.dummy.count in body should be greater than or equal to 0"},
		{"negative VF count", func(s *v1alpha1.NodeConfigSpec) { s.DeviceManagerConfigs.SRIOV.Ifaces[0].VFCount = -4 },
			"deviceManagerConfigs.sriov.ifaces[0].vfCount", "{p}deviceManagerConfigs.sriov.ifaces[0].vfCount: Invalid value: -4: {p}deviceManagerConfigs.sriov.ifaces[0].vfCount in body should be greater than or equal to 0"},
		{"too many dummies", func(s *v1alpha1.NodeConfigSpec) { s.DeviceManagerConfigs.Dummy.Count = 1025 },
			"deviceManagerConfigs.dummy.count", "{p}deviceManagerConfigs.dummy.count: Invalid value: 1025: {p}deviceManagerConfigs.dummy.count in body should be less than or equal to 1024"},
		{"zero retry interval", func(s *v1alpha1.NodeConfigSpec) { s.DRARegistrationRetryInterval = ptr[int32](0) },
			"draRegistrationRetryInterval", "{p}draRegistrationRetryInterval: Invalid value: 0: {p}draRegistrationRetryInterval in body should be greater than or equal to 1"},
		{"zero max attempts", func(s *v1alpha1.NodeConfigSpec) { s.DRARegistrationMaxAttempts = ptr[int32](0) },
			"draRegistrationMaxAttempts", "{p}draRegistrationMaxAttempts: Invalid value: 0: {p}draRegistrationMaxAttempts in body should be greater than or equal to 1"},
		{"bad driver name", func(s *v1alpha1.NodeConfigSpec) { s.DriverName = "Net_Driver" },
			"driverName", `{p}driverName: Invalid value: "Net_Driver": a driver name must be a DNS subdomain: lower-case letters, digits, '-' and '.'`},
		{"ifName in two pools", func(s *v1alpha1.NodeConfigSpec) { s.Pools[1].Filter.IfNames = []string{"dummy0", "0000-03-00-1"} },
			"pools[1].filter.ifNames[1]", "{p}pools: Invalid value: an ifNames value may appear in at most one pool: it names a single device"},
		{"unknown device manager", func(s *v1alpha1.NodeConfigSpec) {
			s.Pools[1].Filter.DeviceManagers = []v1alpha1.DeviceManager{"macvlan"}
		}, "pools[1].filter.deviceManagers[0]", `{p}pools[1].filter.deviceManagers[0]: Unsupported value: "macvlan": supported values: "sr-iov", "dummy", "host"`},
		{"bad PCI address", func(s *v1alpha1.NodeConfigSpec) { s.Pools[0].Filter.PCIAddrs = []string{"03:00.1"} },
			"pools[0].filter.pciAddrs[0]", `{p}pools[0].filter.pciAddrs[0]: Invalid value: "03:00.1": {p}pools[0].filter.pciAddrs[0] in body should match`},
		{"bad vendor ID", func(s *v1alpha1.NodeConfigSpec) { s.Pools[0].Filter.VendorIDs = []string{"intel"} },
			"pools[0].filter.vendorIDs[0]", `{p}pools[0].filter.vendorIDs[0]: Invalid value: "intel": {p}pools[0].filter.vendorIDs[0] in body should match '^0x[0-9a-fA-F]{4}$'`},
		{"long PF name", func(s *v1alpha1.NodeConfigSpec) { s.Pools[0].Filter.PFNames = []string{"a-very-long-ifname"} },
			"pools[0].filter.pfNames[0]", "{p}pools[0].filter.pfNames[0]: Too long: may not be more than 15 bytes"},
		{"host manager selecting everything", func(s *v1alpha1.NodeConfigSpec) { s.DeviceManagerConfigs.Host = &v1alpha1.HostConfig{Enabled: true} },
			"deviceManagerConfigs.host.enabled", "{p}deviceManagerConfigs.host: Invalid value: an enabled host manager needs ifNames, drivers, vendorIDs or deviceIDs"},
		{"duplicate ip pool names", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[1].Name = "v4" },
			"ipPools[1].name", `{p}ipPools[1]: Duplicate value: {"name":"v4"}`},
		{"ip pool subnet with host bits", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[0].Subnet = "10.20.0.1/24" },
			"ipPools[0].subnet", `{p}ipPools[0].subnet: Invalid value: "10.20.0.1/24": subnet must be a CIDR without host bits`},
		{"ip pool range outside the subnet", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[0].RangeStart = "10.21.0.10" },
			"ipPools[0].rangeStart", `{p}ipPools[0].rangeStart: Invalid value: rangeStart must be inside subnet`},
		{"ip pool gateway at the range's end", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[0].Gateway = "10.20.0.99" },
			"ipPools[0].gateway", `{p}ipPools[0].gateway: Invalid value: the gateway must be outside the range`},
		{"ip pool gateway outside the subnet", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[1].Gateway = "fd00:21::1" },
			"ipPools[1].gateway", `{p}ipPools[1].gateway: Invalid value: gateway must be inside subnet`},
		{"ip pool exclude outside the subnet", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[0].Exclude = []string{"10.9.0.0/16"} },
			"ipPools[0].exclude[0]", `{p}ipPools[0].exclude: Invalid value: excluded addresses must be inside subnet`},
		{"ip pool route not a CIDR", func(s *v1alpha1.NodeConfigSpec) { s.IPPools[0].Routes[0].Destination = "default" },
			"ipPools[0].routes[0].destination", `{p}ipPools[0].routes[0].destination: Invalid value: "default": destination must be a CIDR`},
		{"multus resource name ending in '_'", func(s *v1alpha1.NodeConfigSpec) { s.Pools[1].MultusResourceName = "intel.com/vf_" },
			"pools[1].multusResourceName", `{p}pools[1].multusResourceName: Invalid value: "intel.com/vf_": {p}pools[1].multusResourceName in body should match`},
		{"long multus resource name", func(s *v1alpha1.NodeConfigSpec) {
			s.Pools[1].MultusResourceName = "intel.com/" + strings.Repeat("v", 55)
		},
			"pools[1].multusResourceName", `{p}pools[1].multusResourceName: Too long: may not be more than 64 bytes`},
		{"relative sysfs root", func(s *v1alpha1.NodeConfigSpec) { s.SysfsRoot = "host/sys" },
			"sysfsRoot", `{p}sysfsRoot: Invalid value: "host/sys": {p}sysfsRoot in body should match '^/'`},
	}
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fullSpec()
			tt.modify(&s)
			var fe *fielderr.Error
			if err := v1alpha1.Validate(&s); !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("Validate: %v, want an error for %s", err, tt.field)
			}
			for _, obj := range []client.Object{
				&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i)}, Spec: s},
				&v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i)}, Spec: v1alpha1.ClusterConfigSpec{Spec: s}},
			} {
				err := w.c.Create(ctx, obj)
				if !apierrors.IsInvalid(err) {
					t.Errorf("%T accepted or not invalid: %v", obj, err)
					continue
				}
				t.Logf("%T: %v", obj, err)
				prefix := "spec."
				if _, ok := obj.(*v1alpha1.ClusterConfig); ok {
					prefix = "spec.spec."
				}
				if want := strings.ReplaceAll(tt.server, "{p}", prefix); !strings.Contains(err.Error(), want) {
					t.Errorf("%T: message %q does not contain %q", obj, err, want)
				}
			}
		})
	}
	// The full spec itself is valid everywhere.
	good := fullSpec()
	if err := v1alpha1.Validate(&good); err != nil {
		t.Errorf("Validate(fullSpec): %v", err)
	}
	if err := w.c.Create(ctx, &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: good}); err != nil {
		t.Errorf("create a valid NodeConfig: %v", err)
	}
	if err := w.c.Create(ctx, &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "good"},
		Spec: v1alpha1.ClusterConfigSpec{NodeSelector: selector("role=none"), Spec: good}}); err != nil {
		t.Errorf("create a valid ClusterConfig: %v", err)
	}
}

// A ClusterConfig name is a label value on the NodeConfigs it generates:
// 63 characters at most.
func TestCRD_RejectsLongClusterConfigName(t *testing.T) {
	w := newWorld(t)
	err := w.c.Create(context.Background(), &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 64)}})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "a ClusterConfig name is at most 63 characters") {
		t.Errorf("create: %v, want invalid for the name's length", err)
	}
}

// The apiserver fills in the defaults, also inside a ClusterConfig with no
// spec at all; they are Default's.
func TestCRD_Defaults(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := w.c.Create(ctx, &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(ctx, &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}); err != nil {
		t.Fatal(err)
	}
	var nc v1alpha1.NodeConfig
	var cc v1alpha1.ClusterConfig
	w.get("n1", &nc)
	w.get("c1", &cc)
	want := *v1alpha1.Default(&v1alpha1.NodeConfigSpec{})
	for name, got := range map[string]v1alpha1.NodeConfigSpec{"NodeConfig": nc.Spec, "ClusterConfig": cc.Spec.Spec} {
		if got.DriverName != want.DriverName || *got.DRARegistrationRetryInterval != *want.DRARegistrationRetryInterval ||
			*got.DRARegistrationTimeout != *want.DRARegistrationTimeout || *got.DRARegistrationMaxAttempts != *want.DRARegistrationMaxAttempts {
			t.Errorf("%s defaults %+v, want %+v", name, got, want)
		}
	}
}

// kubectl get shows the printer columns: a NodeConfig's driver, pools and
// conditions; a ClusterConfig's governed nodes and whether it conflicts.
func TestCRD_PrinterColumns(t *testing.T) {
	w := newWorld(t)
	w.node("n1")
	w.node("n2")
	older := w.clusterConfig("older", nil, fullSpec())
	waitNextSecond(older.CreationTimestamp)
	w.clusterConfig("newer", nil, spec("newer.example.com"))
	w.operator(controller.Options{})
	w.governed("n1", "older")
	w.status("older", 2, metav1.ConditionFalse)
	w.status("newer", 0, metav1.ConditionTrue)

	// dra's conditions on the NodeConfig.
	w.retry(func(ctx context.Context) error {
		var nc v1alpha1.NodeConfig
		if err := w.c.Get(ctx, key("n1"), &nc); err != nil {
			return err
		}
		nc.Status.Pools = 3
		nc.Status.Conditions = []metav1.Condition{
			{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid, LastTransitionTime: metav1.Now()},
			{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPending, LastTransitionTime: metav1.Now()},
		}
		return w.c.Status().Update(ctx, &nc)
	})

	nodeConfigs := table(t, w.rc, "nodeconfigs")
	if diff := columns(nodeConfigs); diff != "Name Driver Pools Accepted Applied ClusterConfig Age" {
		t.Errorf("NodeConfig columns: %s", diff)
	}
	if got := row(nodeConfigs, "n1"); got != "n1 net.example.com 3 True False older" {
		t.Errorf("NodeConfig n1 row: %q", got)
	}
	clusterConfigs := table(t, w.rc, "clusterconfigs")
	if diff := columns(clusterConfigs); diff != "Name Nodes Conflicting Driver Age" {
		t.Errorf("ClusterConfig columns: %s", diff)
	}
	if got := row(clusterConfigs, "older"); got != "older 2 False net.example.com" {
		t.Errorf("ClusterConfig older row: %q", got)
	}
	if got := row(clusterConfigs, "newer"); got != "newer 0 True newer.example.com" {
		t.Errorf("ClusterConfig newer row: %q", got)
	}
}

// table lists a resource as kubectl get does.
func table(t *testing.T, rc *rest.Config, resource string) *metav1.Table {
	t.Helper()
	cfg := rest.CopyConfig(rc)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientNegotiator()
	rcl, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tbl metav1.Table
	err = rcl.Get().Resource(resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(context.Background()).Into(&tbl)
	if err != nil {
		t.Fatalf("table of %s: %v", resource, err)
	}
	return &tbl
}

func columns(tbl *metav1.Table) string {
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		names = append(names, c.Name)
	}
	return strings.Join(names, " ")
}

// row is a row's cells but the last (the age), space-separated.
func row(tbl *metav1.Table, name string) string {
	for _, r := range tbl.Rows {
		if len(r.Cells) > 0 && r.Cells[0] == name {
			var cells []string
			for _, c := range r.Cells[:len(r.Cells)-1] {
				cells = append(cells, fmt.Sprint(c))
			}
			return strings.Join(cells, " ")
		}
	}
	return "no row " + name
}
