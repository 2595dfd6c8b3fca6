package v1alpha1_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/fielderr"
)

// The fuzz targets decode any bytes as the apiserver's JSON and check
// Validate: a rejection is a *fielderr.Error naming a field the spec has
// (with an index inside its list), the same every time; an accepted spec
// is still accepted after a JSON round trip, a deep copy and defaulting.
// That the node's services take what Validate accepts is
// shared/apis/agreement's FuzzNodeConfig.

// nodeConfigSeeds are specs to start from: valid ones, and ones a check
// refused.
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
	`{"deviceManagerConfigs":{"sriov":{"enabled":true,"sysBusPCIDevPath":"/sys/../sys/bus/pci/devices"}}}`,
	`{"sysfsRoot":"/host//sys/"}`,
	`{"ipPools":[{"name":"a","subnet":"10.0.0.7/32","gateway":"10.0.0.7"}]}`,
	`{"pools":[{"name":"a","filter":{"ifNames":["x"]}},{"name":"b","filter":{"ifNames":["x"]}}]}`,
	`{"pools":[{"name":"a","multusResourceName":"intel.com/intel_sriov_netdevice"},{"name":"b","multusResourceName":"a.b/c/d"}]}`,
}

func FuzzValidate(f *testing.F) {
	for _, s := range nodeConfigSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec v1alpha1.NodeConfigSpec
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		checkSpec(t, &spec)
	})
}

// FuzzValidateClusterConfig: a ClusterConfig's spec.spec is what the
// operator copies into NodeConfigs, so it is checked the same way; its
// node selector parses or not, the same every time.
func FuzzValidateClusterConfig(f *testing.F) {
	for _, s := range nodeConfigSeeds {
		f.Add([]byte(`{"spec":{"nodeSelector":{"matchLabels":{"netdra.io/sriov":"true"}},"spec":` + s + `}}`))
	}
	f.Add([]byte(`{"spec":{"nodeSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}}}`))
	f.Add([]byte(`{"spec":{"nodeSelector":{"matchExpressions":[{"key":"a b","operator":"Exists","values":["x"]}]}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var cc v1alpha1.ClusterConfig
		if json.Unmarshal(raw, &cc) != nil {
			return
		}
		_, err := metav1.LabelSelectorAsSelector(cc.Spec.NodeSelector)
		_, again := metav1.LabelSelectorAsSelector(cc.Spec.NodeSelector)
		if (err == nil) != (again == nil) {
			t.Fatalf("selector %v: %v, then %v", cc.Spec.NodeSelector, err, again)
		}
		checkSpec(t, &cc.Spec.Spec)
	})
}

func checkSpec(t *testing.T, spec *v1alpha1.NodeConfigSpec) {
	t.Helper()
	err := v1alpha1.Validate(spec)
	if again := v1alpha1.Validate(spec); fmt.Sprint(err) != fmt.Sprint(again) {
		t.Fatalf("Validate is not deterministic: %v, then %v", err, again)
	}
	if err != nil {
		var fe *fielderr.Error
		if !errors.As(err, &fe) {
			t.Fatalf("Validate = %v (%T), want a *fielderr.Error", err, err)
		}
		if bad := resolve(reflect.ValueOf(spec).Elem(), fe.Field); bad != "" {
			t.Fatalf("Validate = %v: the field %q is not in the spec: %s", err, fe.Field, bad)
		}
		return
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var back *v1alpha1.NodeConfigSpec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec, back, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("JSON round trip (-before +after):\n%s", diff)
	}
	for name, s := range map[string]*v1alpha1.NodeConfigSpec{"round-tripped": back, "deep copy": spec.DeepCopy(), "defaulted": v1alpha1.Default(spec.DeepCopy())} {
		if err := v1alpha1.Validate(s); err != nil {
			t.Fatalf("the %s spec %s is refused: %v", name, b, err)
		}
	}
}

var segment = regexp.MustCompile(`^([A-Za-z]+)(?:\[(\d+)\])?$`)

// resolve follows a field path ("pools[1].filter.ifNames[2]") through v
// by JSON names and says what does not resolve, or "".
func resolve(v reflect.Value, path string) string {
	for _, seg := range strings.Split(path, ".") {
		m := segment.FindStringSubmatch(seg)
		if m == nil {
			return fmt.Sprintf("%q is not a field name", seg)
		}
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v = reflect.New(v.Type().Elem())
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return fmt.Sprintf("%q is under a %s, not an object", seg, v.Kind())
		}
		f, ok := fieldByJSONName(v, m[1])
		if !ok {
			return fmt.Sprintf("%s has no field %q", v.Type(), m[1])
		}
		v = f
		if m[2] == "" {
			continue
		}
		i, _ := strconv.Atoi(m[2])
		if v.Kind() != reflect.Slice || i >= v.Len() {
			return fmt.Sprintf("%s is not a list with an item %d", seg, i)
		}
		v = v.Index(i)
	}
	return ""
}

func fieldByJSONName(v reflect.Value, name string) (reflect.Value, bool) {
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
