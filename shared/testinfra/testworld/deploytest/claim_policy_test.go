package deploytest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// claimPolicyCases are parameters the chart's claim policy refuses, each
// with the parameter its message names: the one claimconfig.Parse names
// (dra's own checks when dra is set; parse is Parse's name when it
// differs: encoding/json names a list element's field without its index).
var claimPolicyCases = []struct {
	name, params, field, parse string
	dra                        bool
}{
	{name: "unknown key", params: `{"podIfName":"net1","vlanId":5}`, field: "vlanId"},
	{name: "key case", params: `{"VLAN":5}`, field: "VLAN"},
	{name: "apiVersion", params: `{"apiVersion":"netdra.io/v2","kind":"NetworkConfig"}`, field: "apiVersion"},
	{name: "kind", params: `{"apiVersion":"netdra.io/v1alpha1","kind":"NodeConfig"}`, field: "kind"},
	{name: "podIfName long", params: `{"podIfName":"a-very-long-interface"}`, field: "podIfName"},
	{name: "podIfName lo", params: `{"podIfName":"lo"}`, field: "podIfName"},
	{name: "vlan range", params: `{"vlan":5000}`, field: "vlan"},
	{name: "vlan type", params: `{"vlan":"100"}`, field: "vlan"},
	{name: "vlanQoS range", params: `{"vlan":5,"vlanQoS":9}`, field: "vlanQoS"},
	{name: "vlanProto", params: `{"vlan":5,"vlanProto":"802.1x"}`, field: "vlanProto"},
	{name: "mac multicast", params: `{"mac":"03:00:00:00:00:01"}`, field: "mac"},
	{name: "mac syntax", params: `{"mac":"02:00:00:00:01"}`, field: "mac"},
	{name: "spoofChk type", params: `{"spoofChk":"yes"}`, field: "spoofChk"},
	{name: "linkState", params: `{"linkState":"up"}`, field: "linkState"},
	{name: "maxTxRate negative", params: `{"maxTxRate":-1}`, field: "maxTxRate"},
	{name: "mtu", params: `{"mtu":10}`, field: "mtu"},
	{name: "address syntax", params: `{"addresses":["10.0.0.2/24","10.0.0.300/24"]}`, field: "addresses[1]"},
	{name: "address multicast", params: `{"addresses":["224.0.0.5/24"]}`, field: "addresses[0]"},
	{name: "address twice", params: `{"addresses":["10.0.0.2/24","fd00::2/64","10.0.0.2/24"]}`, field: "addresses[2]", dra: true},
	{name: "ipPools three", params: `{"ipPools":["a","b","c"]}`, field: "ipPools"},
	{name: "ipPool name", params: `{"ipPools":["Pool_1"]}`, field: "ipPools[0]"},
	{name: "vfio type", params: `{"vfio":1}`, field: "vfio"},
	{name: "routes type", params: `{"routes":{"destination":"::/0"}}`, field: "routes"},
	{name: "route key", params: `{"routes":[{"destination":"::/0"},{"destination":"::/0","via":"fd00::1"}]}`, field: "routes[1].via"},
	{name: "route destination host bits", params: `{"routes":[{"destination":"10.1.0.1/16"}]}`, field: "routes[0].destination"},
	{name: "route destination missing", params: `{"routes":[{"gateway":"10.0.0.1"}]}`, field: "routes[0].destination"},
	{name: "route gateway family", params: `{"routes":[{"destination":"::/0","gateway":"10.0.0.1"}]}`, field: "routes[0].gateway"},
	{name: "route table", params: `{"routes":[{"destination":"::/0"},{"destination":"10.0.0.0/8","table":253}]}`, field: "routes[1].table"},
	{name: "route scope", params: `{"routes":[{"destination":"::/0","scope":"global"}]}`, field: "routes[0].scope"},
	{name: "route scope link with gateway", params: `{"routes":[{"destination":"10.1.0.0/16","gateway":"10.0.0.1","scope":"link"}]}`, field: "routes[0].scope"},
	{name: "route source family", params: `{"routes":[{"destination":"::/0","source":"10.0.0.1"}]}`, field: "routes[0].source"},
	{name: "route metric", params: `{"routes":[{"destination":"::/0","metric":1.5}]}`, field: "routes[0].metric", parse: "routes.metric"},
	{name: "route onlink", params: `{"routes":[{"destination":"::/0","onlink":true}]}`, field: "routes[0].onlink"},
	{name: "rule table", params: `{"rules":[{"from":"10.0.0.0/8"}]}`, field: "rules[0].table"},
	{name: "rule from", params: `{"rules":[{"from":"10.0.0.1/8","table":5}]}`, field: "rules[0].from"},
	{name: "rule families", params: `{"rules":[{"from":"10.0.0.0/8","to":"fd00::/8","table":5}]}`, field: "rules[0].to"},
	{name: "rule oif", params: `{"rules":[{"oif":"a b","table":5}]}`, field: "rules[0].oif"},
	{name: "rule fwmask", params: `{"rules":[{"fwmask":1,"table":5}]}`, field: "rules[0].fwmask"},
	{name: "rule priority", params: `{"rules":[{"priority":-5,"table":5}]}`, field: "rules[0].priority", parse: "rules.priority"},
	{name: "neighbor address", params: `{"neighbors":[{"address":"10.0.0.0/24","mac":"02:00:00:00:00:01"}]}`, field: "neighbors[0].address"},
	{name: "neighbor mac", params: `{"neighbors":[{"address":"10.0.0.1","mac":"00:00:00:00:00:00"}]}`, field: "neighbors[0].mac"},
	{name: "vrf key", params: `{"vrf":{"name":"red","table":5,"Table":6}}`, field: "vrf.Table"},
	{name: "vrf table", params: `{"vrf":{"name":"red"}}`, field: "vrf.table"},
	{name: "vrf name", params: `{"vrf":{"table":5}}`, field: "vrf.name"},
	{name: "sysctl not allowed", params: `{"sysctls":{"ipv4.mc_forwarding":1}}`, field: "sysctls"},
	{name: "sysctl range", params: `{"sysctls":{"ipv4.rp_filter":3}}`, field: "sysctls"},
	{name: "txqueuelen", params: `{"txqueuelen":4294967295}`, field: "txqueuelen"},
	{name: "gsoMaxSize", params: `{"gsoMaxSize":600000}`, field: "gsoMaxSize"},
	{name: "groIPv4MaxSize", params: `{"groIPv4MaxSize":0}`, field: "groIPv4MaxSize"},
	{name: "feature name", params: `{"features":{"rx gro":true}}`, field: "features"},
	{name: "private flag value", params: `{"privateFlags":{"legacy-rx":"on"}}`, field: "privateFlags"},
	{name: "ebpfPrograms", params: `{"ebpfPrograms":"no"}`, field: "ebpfPrograms"},
}

// claimsDocExample is the parameters of the full claim example in
// docs/claims.md, under its "Claim parameters (reference)" heading.
func claimsDocExample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(podsDir, "..", "docs", "claims.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), " Claim parameters (reference)\n")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/claims.md has no claim example under Claim parameters (reference)")
	}
	var doc struct {
		Config []struct {
			Opaque struct {
				Parameters any `json:"parameters"`
			} `json:"opaque"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil || len(doc.Config) != 1 {
		t.Fatalf("docs/claims.md's claim example: %v", err)
	}
	j, err := yaml.Marshal(doc.Config[0].Opaque.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := yaml.YAMLToJSON(j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claimconfig.Parse(raw); err != nil {
		t.Fatalf("docs/claims.md's claim example: %v", err)
	}
	return raw
}

// claimSpec asks for one netdra device, with a config entry for another
// driver first and then one for driver with params.
func claimSpec(driver string, params []byte) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdra.io"}}},
		Config: []resourceapi.DeviceClaimConfiguration{
			{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{"vlan":"anything"}`)}}}},
			{Requests: []string{"net"}, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: driver, Parameters: runtime.RawExtension{Raw: params}}}},
		},
	}}
}

// TestClaimPolicy installs the chart's claim admission policy into a
// control plane and creates ResourceClaims and ResourceClaimTemplates:
// each bad case is refused, its message naming the config entry and the
// parameter as prepare names it; docs/claims.md's example is accepted, as
// are the bad parameters for another driver.
func TestClaimPolicy(t *testing.T) {
	cp := worldtest.NewControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := cp.Client()
	objs := renderChart(t, "--show-only", "templates/claim-policy.yaml")
	policy := typed[admissionv1.ValidatingAdmissionPolicy](t, find(t, objs, "ValidatingAdmissionPolicy", "netdra-claims"))
	binding := typed[admissionv1.ValidatingAdmissionPolicyBinding](t, find(t, objs, "ValidatingAdmissionPolicyBinding", "netdra-claims"))
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns = "claims"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	n := 0
	create := func(template bool, driver string, params []byte) error {
		n++
		meta := metav1.ObjectMeta{Name: fmt.Sprintf("c%d", n), Namespace: ns}
		if template {
			_, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{ObjectMeta: meta,
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(driver, params)}}, metav1.CreateOptions{})
			return err
		}
		_, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: meta, Spec: claimSpec(driver, params)}, metav1.CreateOptions{})
		return err
	}

	// The policy works once the apiserver has loaded it.
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return create(false, "netdra.io", []byte(`{"vlan":5000}`)) != nil, nil
	}); err != nil {
		p, _ := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "netdra-claims", metav1.GetOptions{})
		t.Fatalf("the policy never refused a claim: %v (status %+v)", err, p.Status)
	}
	if p, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "netdra-claims", metav1.GetOptions{}); err == nil && p.Status.TypeChecking != nil {
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Logf("type checking: %s: %s", w.FieldRef, w.Warning)
		}
	}

	good := claimsDocExample(t)
	for _, template := range []bool{false, true} {
		what, path := "claim", "spec.devices.config[1].opaque.parameters."
		if template {
			what, path = "template", "spec.spec.devices.config[1].opaque.parameters."
		}
		t.Run(what, func(t *testing.T) {
			if err := create(template, "netdra.io", good); err != nil {
				t.Errorf("docs/claims.md's example refused: %v", err)
			}
			for _, tc := range claimPolicyCases {
				if !tc.dra {
					_, err := claimconfig.Parse([]byte(tc.params))
					var fe *fielderr.Error
					if want := cmp.Or(tc.parse, tc.field); !errors.As(err, &fe) || fe.Field != want {
						t.Errorf("%s: Parse says %v, the case wants field %s", tc.name, err, tc.field)
					}
				}
				err := create(template, "netdra.io", []byte(tc.params))
				if want := path + tc.field + ":"; err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %s: got %v, want a refusal naming %q", tc.name, tc.params, err, want)
				}
				if err := create(template, "other.example.com", []byte(tc.params)); err != nil {
					t.Errorf("%s: for another driver: %v", tc.name, err)
				}
			}
		})
	}

}
