package agent

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// TestSlicePools: the pools are published under <node>/<pool>, so two
// nodes with the same NodeConfig publish different pools.
func TestSlicePools(t *testing.T) {
	res := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		"net":   {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{{Name: "data0"}}}}},
		"empty": {Slices: []resourceslice.Slice{{}}},
	}}
	a, b := slicePools("node-a", res), slicePools("node-b", res)
	if len(a.Pools) != 2 || len(a.Pools["node-a/net"].Slices[0].Devices) != 1 || len(a.Pools["node-a/empty"].Slices) != 1 {
		t.Errorf("node-a: %v", a.Pools)
	}
	if _, ok := b.Pools["node-b/net"]; !ok {
		t.Errorf("node-b: %v", b.Pools)
	}
	if _, ok := res.Pools["net"]; !ok || len(res.Pools) != 2 {
		t.Errorf("the input changed: %v", res.Pools)
	}
}
