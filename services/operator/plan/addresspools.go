package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// CarveAddressPools carves the cluster address pools of every ClusterConfig
// res gives nodes to (see Carve): each pool's blocks go into the
// ClusterConfig's status in res, with the netdra.io/AddressPoolExhausted
// and netdra.io/InvalidAddressPool conditions, and each governed node's
// assignment gets a spec of its own with its blocks appended to ipPools.
// existing are the NodeConfigs, for dra's counts of each node's pools. It
// changes res in place; now is the lastTransitionTime of a condition that
// changes.
func CarveAddressPools(res *Result, configs []v1alpha1.ClusterConfig, existing []v1alpha1.NodeConfig, now metav1.Time) {
	usage := usageByNode(existing)
	for i := range configs {
		cc := &configs[i]
		st, ok := res.Statuses[cc.Name]
		if !ok || (len(cc.Spec.AddressPools) == 0 && len(cc.Status.AddressPools) == 0) {
			continue
		}
		nodes := governedBy(res, cc.Name)
		if err := invalidPools(&cc.Spec); err != nil {
			setInvalidPool(&st, cc.Generation, err, now)
			res.Statuses[cc.Name] = st
			continue
		}
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionInvalidAddressPool)
		perNode := carveAll(cc, &st, nodes, res.Present, usage, now)
		for _, n := range nodes {
			a := res.Assignments[n]
			spec := a.Spec.DeepCopy()
			spec.IPPools = append(spec.IPPools, perNode[n]...)
			res.Assignments[n] = Assignment{ClusterConfig: a.ClusterConfig, Spec: spec}
		}
		res.Statuses[cc.Name] = st
	}
}

// carveAll carves cc's pools into st and returns each node's node-local
// pools, in the spec's pool order.
func carveAll(cc *v1alpha1.ClusterConfig, st *v1alpha1.ClusterConfigStatus, nodes, present []string, usage map[string]map[string]v1alpha1.IPPoolUsage, now metav1.Time) map[string][]v1alpha1.IPPool {
	perNode := map[string][]v1alpha1.IPPool{}
	var pools []v1alpha1.AddressPoolStatus
	var starving []string
	for i := range cc.Spec.AddressPools {
		pool := &cc.Spec.AddressPools[i]
		counts := map[string]v1alpha1.IPPoolUsage{}
		for n, u := range usage {
			if c, ok := u[pool.Name]; ok {
				counts[n] = c
			}
		}
		ps, starved := Carve(pool, recorded(cc.Status.AddressPools, pool.Name), nodes, present, counts)
		pools = append(pools, ps)
		if len(starved) > 0 {
			starving = append(starving, fmt.Sprintf("pool %q (%s in /%d blocks) has no free block for %s",
				pool.Name, pool.Subnet, pool.BlockPrefixLength, nameList(starved)))
		}
		for n, blocks := range blocksByNode(ps) {
			if !slices.Contains(nodes, n) {
				continue // retained
			}
			if ip, err := NodeIPPool(pool, blocks); err == nil {
				perNode[n] = append(perNode[n], ip)
			}
		}
	}
	st.AddressPools = pools
	setExhausted(st, cc.Generation, starving, now)
	return perNode
}

func setExhausted(st *v1alpha1.ClusterConfigStatus, generation int64, starving []string, now metav1.Time) {
	cond := metav1.Condition{Type: v1alpha1.ConditionAddressPoolExhausted, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonBlocksAvailable, Message: "every governed node has a block of every address pool",
		ObservedGeneration: generation, LastTransitionTime: now}
	if len(starving) > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonPoolExhausted
		cond.Message = "address pool exhausted: " + strings.Join(starving, "; ")
	}
	if len(st.AddressPools) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionAddressPoolExhausted)
		return
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// invalidPools is the error of spec's address pools, nil when they are
// valid (an invalid spec.spec is dra's to report).
func invalidPools(spec *v1alpha1.ClusterConfigSpec) error {
	return v1alpha1.ValidateAddressPools(spec)
}

func setInvalidPool(st *v1alpha1.ClusterConfigStatus, generation int64, err error, now metav1.Time) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionInvalidAddressPool,
		Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonInvalidAddressPool,
		Message: "spec." + err.Error() + "; no block is handed out until it is fixed", ObservedGeneration: generation, LastTransitionTime: now})
}

// nameList is names, the first maxNamesInMessage of them.
func nameList(names []string) string {
	list := strings.Join(names[:min(len(names), maxNamesInMessage)], ", ")
	if len(names) > maxNamesInMessage {
		list += fmt.Sprintf(" and %d more", len(names)-maxNamesInMessage)
	}
	return "node(s) " + list
}

func recorded(pools []v1alpha1.AddressPoolStatus, name string) *v1alpha1.AddressPoolStatus {
	for i := range pools {
		if pools[i].Name == name {
			return &pools[i]
		}
	}
	return nil
}

func governedBy(res *Result, clusterConfig string) []string {
	var nodes []string
	for _, n := range slices.Sorted(maps.Keys(res.Assignments)) {
		if res.Assignments[n].ClusterConfig == clusterConfig {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// blocksByNode groups a pool status's blocks by node.
func blocksByNode(ps v1alpha1.AddressPoolStatus) map[string][]netip.Prefix {
	out := map[string][]netip.Prefix{}
	for _, b := range ps.Blocks {
		if p, err := netip.ParsePrefix(b.CIDR); err == nil {
			out[b.Node] = append(out[b.Node], p)
		}
	}
	return out
}

// usageByNode is dra's counts: node -> pool name -> count.
func usageByNode(existing []v1alpha1.NodeConfig) map[string]map[string]v1alpha1.IPPoolUsage {
	out := map[string]map[string]v1alpha1.IPPoolUsage{}
	for _, nc := range existing {
		for _, u := range nc.Status.IPPools {
			if out[nc.Name] == nil {
				out[nc.Name] = map[string]v1alpha1.IPPoolUsage{}
			}
			out[nc.Name][u.Name] = u
		}
	}
	return out
}
