package driver

import (
	resourceapi "k8s.io/api/resource/v1"
	"strings"
	"testing"
)

// TestPrepare_AnotherNodesPool: a result from another node's pool of the
// same name is not this node's device: refused, nothing done.
func TestPrepare_AnotherNodesPool(t *testing.T) {
	r := newRig(t)
	res := result("net", "vf1")
	res.Pool = "node-b/" + testPool
	_, err := r.prepare(t, claimSpec{name: "c1", pods: []string{"web"}, results: []resourceapi.DeviceRequestAllocationResult{res}}.build())
	if err == nil || !strings.Contains(err.Error(), `pool "node-b/pool-a" is not a pool of node "node-a"`) {
		t.Fatalf("got %v, want the other node's pool refused", err)
	}
	for _, c := range r.rec.get() {
		if strings.HasPrefix(c, "prov.") || strings.HasPrefix(c, "state.BeginPrepare") {
			t.Errorf("%s was called", c)
		}
	}
}
