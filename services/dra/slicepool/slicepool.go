// Package slicepool translates between netdra's pool names and the pool
// names of its ResourceSlices. The DRA API wants a pool name unique per
// driver across the cluster: the scheduler keys an allocated device by
// driver/pool/device, with no node, so two nodes publishing pool "net"
// with device "data0" would share one allocation. Inside netdra (state
// rows, NodeConfig, metrics, claim config, device attributes) a pool keeps
// its own name; at the Kubernetes API boundary (ResourceSlices, allocation
// results, claim status entries, the kubelet's prepare and health calls)
// it is <node>/<pool>.
package slicepool

import (
	"fmt"
	"strings"
)

// MaxLen is the API's limit on a pool name.
const MaxLen = 253

// SlicePool is the ResourceSlice pool name of node's pool.
func SlicePool(node, pool string) string {
	return node + "/" + pool
}

// PoolOf is netdra's pool name of a ResourceSlice pool name; ok is false
// when slicePool is not one of node's pools (another node's, or not
// netdra's form).
func PoolOf(node, slicePool string) (pool string, ok bool) {
	pool, ok = strings.CutPrefix(slicePool, node+"/")
	if !ok || pool == "" || strings.Contains(pool, "/") {
		return "", false
	}
	return pool, true
}

// Of is PoolOf with an error naming the slice pool when it is not node's.
func Of(node, slicePool string) (string, error) {
	p, ok := PoolOf(node, slicePool)
	if !ok {
		return "", fmt.Errorf("pool %q is not a pool of node %q (want %q)", slicePool, node, SlicePool(node, "<pool>"))
	}
	return p, nil
}

// Check is why node's pool cannot be published (its slice pool name is
// longer than MaxLen), or nil.
func Check(node, pool string) error {
	if n := len(SlicePool(node, pool)); n > MaxLen {
		return fmt.Errorf("the ResourceSlice pool name %s/%s would be %d characters, more than %d: shorten the pool name (at most %d characters on node %s)",
			node, pool, n, MaxLen, max(MaxLen-len(node)-1, 0), node)
	}
	return nil
}
