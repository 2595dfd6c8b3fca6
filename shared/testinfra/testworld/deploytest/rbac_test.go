package deploytest

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// access is one request a ServiceAccount makes, or must not be able to.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	if a.name != "" {
		r += " " + a.name
	}
	if a.namespace != "" {
		r += " in " + a.namespace
	}
	return a.verb + " " + r
}

const (
	ns       = "netdra-system"
	claimsNS = "some-app"
	resource = "resource.k8s.io"
	netdra   = "netdra.io"
)

// draNeeds is every request dra makes (services/dra and the kubeletplugin
// and resourceslice libraries).
var draNeeds = []access{
	{"get", resource, "resourceclaims", "", claimsNS, "a-claim"},
	{"update", resource, "resourceclaims", "status", claimsNS, "a-claim"},
	{"associated-node:update", resource, "resourceclaims", "driver", claimsNS, "netdra.io"},
	{"list", resource, "resourceslices", "", "", ""},
	{"watch", resource, "resourceslices", "", "", ""},
	{"create", resource, "resourceslices", "", "", ""},
	{"update", resource, "resourceslices", "", "", "node-1-netdra.io-x"},
	{"delete", resource, "resourceslices", "", "", "node-1-netdra.io-x"},
	{"get", "", "nodes", "", "", "node-1"},
	{"get", "", "pods", "", claimsNS, "app"},
	{"list", "", "pods", "", "", ""},
	{"get", netdra, "nodeconfigs", "", "", "node-1"},
	{"list", netdra, "nodeconfigs", "", "", ""},
	{"watch", netdra, "nodeconfigs", "", "", ""},
	{"patch", netdra, "nodeconfigs", "status", "", "node-1"}, // nodeconfig.StatusWriter: a merge patch
	{"create", "", "events", "", claimsNS, ""},
	{"patch", "", "events", "", "default", "x"},
}

// draMustNot is a sample of what dra has no business doing.
var draMustNot = []access{
	{"get", "", "secrets", "", ns, "x"},
	{"list", "", "secrets", "", "", ""},
	{"update", resource, "resourceclaims", "", claimsNS, "a-claim"},
	{"update", resource, "resourceclaims", "binding", "", ""},
	{"arbitrary-node:update", resource, "resourceclaims", "driver", claimsNS, "netdra.io"},
	{"associated-node:update", resource, "resourceclaims", "driver", claimsNS, "gpu.example.com"},
	{"create", "", "pods", "", claimsNS, ""},
	{"delete", "", "pods", "", claimsNS, "app"},
	{"update", "", "nodes", "", "", "node-1"},
	{"create", netdra, "nodeconfigs", "", "", ""},
	{"update", netdra, "nodeconfigs", "", "", "node-1"},
	{"list", netdra, "clusterconfigs", "", "", ""},
	{"create", "coordination.k8s.io", "leases", "", ns, ""},
}

// operatorNeeds is every request the operator makes
// (services/operator/controller and controller-runtime's leader election).
var operatorNeeds = []access{
	{"get", "", "nodes", "", "", "node-1"},
	{"list", "", "nodes", "", "", ""},
	{"watch", "", "nodes", "", "", ""},
	{"get", netdra, "clusterconfigs", "", "", "c"},
	{"list", netdra, "clusterconfigs", "", "", ""},
	{"watch", netdra, "clusterconfigs", "", "", ""},
	{"update", netdra, "clusterconfigs", "status", "", "c"},
	{"get", netdra, "nodeconfigs", "", "", "node-1"},
	{"list", netdra, "nodeconfigs", "", "", ""},
	{"watch", netdra, "nodeconfigs", "", "", ""},
	{"create", netdra, "nodeconfigs", "", "", ""},
	{"update", netdra, "nodeconfigs", "", "", "node-1"},
	{"delete", netdra, "nodeconfigs", "", "", "node-1"},
	{"create", "coordination.k8s.io", "leases", "", ns, ""},
	{"get", "coordination.k8s.io", "leases", "", ns, "netdra-operator"},
	{"update", "coordination.k8s.io", "leases", "", ns, "netdra-operator"},
	{"create", "", "events", "", ns, ""},
	{"patch", "", "events", "", ns, "x"},
}

var operatorMustNot = []access{
	{"get", "", "secrets", "", ns, "x"},
	{"update", "", "nodes", "", "", "node-1"},
	{"update", netdra, "clusterconfigs", "", "", "c"},
	{"delete", netdra, "clusterconfigs", "", "", "c"},
	{"update", netdra, "nodeconfigs", "status", "", "node-1"},
	{"get", "coordination.k8s.io", "leases", "", "kube-system", "netdra-operator"},
	{"update", "coordination.k8s.io", "leases", "", ns, "another-lease"},
	{"create", "", "events", "", "kube-system", ""},
	{"list", "", "pods", "", "", ""},
	{"get", resource, "resourceclaims", "", claimsNS, "a-claim"},
}

// nodeCredentialless are requests no other identity of the namespace may
// make: the provisioner, state and nri hold no token, and the namespace's
// default ServiceAccount has no rights.
var nodeCredentialless = append(append([]access{}, draNeeds...), operatorNeeds...)

// TestRBAC_LeastPrivilege installs the base and asks the real authorizer
// (SubjectAccessReview, as the pod's token presents each ServiceAccount)
// whether each component may make each request its code makes, and may
// not make a sample of others.
func TestRBAC_LeastPrivilege(t *testing.T) {
	a := newApplier(t)
	installBase(t, a)
	// The token of a pod on node-1, as the apiserver sees it.
	sa := func(name string) authorizationv1.SubjectAccessReviewSpec {
		return authorizationv1.SubjectAccessReviewSpec{
			User:   fmt.Sprintf("system:serviceaccount:%s:%s", ns, name),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			Extra:  map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/node-name": {"node-1"}},
		}
	}
	check := func(t *testing.T, who authorizationv1.SubjectAccessReviewSpec, list []access, want bool) {
		t.Helper()
		for _, acc := range list {
			spec := who
			spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Verb: acc.verb, Group: acc.group,
				Resource: acc.resource, Subresource: acc.subresource, Namespace: acc.namespace, Name: acc.name}
			sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
				&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: %v", acc, err)
			}
			if sar.Status.Allowed != want {
				t.Errorf("%s may %s: %v, want %v (%s)", who.User, acc, sar.Status.Allowed, want, sar.Status.Reason)
			}
		}
	}
	t.Run("dra", func(t *testing.T) {
		check(t, sa("netdra-dra"), draNeeds, true)
		check(t, sa("netdra-dra"), draMustNot, false)
	})
	t.Run("operator", func(t *testing.T) {
		check(t, sa("netdra-operator"), operatorNeeds, true)
		check(t, sa("netdra-operator"), operatorMustNot, false)
	})
	t.Run("nobody else", func(t *testing.T) {
		check(t, sa("default"), nodeCredentialless, false)
	})
}
