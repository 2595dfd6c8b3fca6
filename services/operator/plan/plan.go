// Package plan is the operator's decision, as pure functions: which
// ClusterConfig governs which node, what status each ClusterConfig gets
// (Compute), and which writes bring the cluster's NodeConfigs there (Diff).
// It reads no clock and calls no API server: the controller lists the
// objects, calls these and makes the writes.
//
// The rules, from the reference design:
//   - A ClusterConfig selects the nodes its nodeSelector matches; an absent
//     or empty selector matches every node, a selector that cannot be
//     parsed matches none.
//   - ClusterConfigs take nodes in order of creationTimestamp, then name:
//     the first one to select a node occupies it.
//   - A ClusterConfig that selects a node an earlier one occupies is
//     conflicting and occupies none of its nodes: they keep what the
//     occupant assigned, or stay unconfigured. A later ClusterConfig
//     conflicts only with occupants, never with a conflicting one.
//   - Each occupied node gets a NodeConfig named after it whose spec is the
//     occupant's spec.spec, verbatim, labelled as the operator's; its
//     blocks of the occupant's cluster address pools are appended to its
//     ipPools (CarveAddressPools, with the rules in blocks.go).
//   - The operator's NodeConfigs that no ClusterConfig assigns any more
//     (node gone, not selected, ClusterConfig deleted or conflicting) are
//     deleted; a NodeConfig without the operator's label is left alone
//     unless its node is assigned, which takes it over.
package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Node is what the plan needs of a node.
type Node struct {
	Name   string
	Labels map[string]string
}

// Assignment is a node governed by a ClusterConfig.
type Assignment struct {
	// ClusterConfig is the governing ClusterConfig's name.
	ClusterConfig string
	// Spec is its spec.spec: the NodeConfig spec the node gets.
	Spec *v1alpha1.NodeConfigSpec
}

// Result is the state Compute wants.
type Result struct {
	// Assignments maps each governed node's name to its assignment.
	Assignments map[string]Assignment
	// Present are the names of the nodes that exist, governed or not
	// (their blocks of cluster address pools are retained).
	Present []string
	// Statuses maps each ClusterConfig's name to the status it should
	// have.
	Statuses map[string]v1alpha1.ClusterConfigStatus
}

// maxNamesInMessage bounds the node names a conflict message lists per
// occupant.
const maxNamesInMessage = 10

// Compute assigns nodes to ClusterConfigs by the package's rules and
// returns the assignments and each ClusterConfig's status. Statuses start
// from each ClusterConfig's current status, so an unchanged condition keeps
// its lastTransitionTime; now is the lastTransitionTime of a condition that
// changes. ClusterConfigs being deleted are ignored. The inputs are not
// modified.
func Compute(nodes []Node, configs []v1alpha1.ClusterConfig, now metav1.Time) Result {
	res := Result{Assignments: map[string]Assignment{}, Statuses: map[string]v1alpha1.ClusterConfigStatus{}}
	for _, n := range nodes {
		res.Present = append(res.Present, n.Name)
	}
	ordered := make([]*v1alpha1.ClusterConfig, 0, len(configs))
	for i := range configs {
		if configs[i].DeletionTimestamp == nil {
			ordered = append(ordered, &configs[i])
		}
	}
	slices.SortFunc(ordered, func(a, b *v1alpha1.ClusterConfig) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	sortedNodes := slices.SortedFunc(slices.Values(nodes), func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	for _, cc := range ordered {
		sel, selErr := selector(cc.Spec.NodeSelector)
		var selected []string
		occupants := map[string][]string{} // occupant -> nodes it holds that cc selects
		for _, n := range sortedNodes {
			if !sel.Matches(labels.Set(n.Labels)) {
				continue
			}
			selected = append(selected, n.Name)
			if a, taken := res.Assignments[n.Name]; taken {
				occupants[a.ClusterConfig] = append(occupants[a.ClusterConfig], n.Name)
			}
		}
		governed := 0
		if len(occupants) == 0 {
			for _, n := range selected {
				res.Assignments[n] = Assignment{ClusterConfig: cc.Name, Spec: &cc.Spec.Spec}
			}
			governed = len(selected)
		}
		res.Statuses[cc.Name] = status(cc, governed, len(selected), occupants, selErr, now)
	}
	return res
}

// selector is ls as a labels.Selector; nil selects every node.
func selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return labels.Nothing(), err
	}
	return sel, nil
}

// status is cc's new status: its current one with nodes, observedGeneration
// and the conditions set.
func status(cc *v1alpha1.ClusterConfig, governed, selected int, occupants map[string][]string, selErr error, now metav1.Time) v1alpha1.ClusterConfigStatus {
	st := *cc.Status.DeepCopy()
	st.ObservedGeneration = cc.Generation
	st.Nodes = int32(governed)
	if st.Conditions == nil {
		st.Conditions = []metav1.Condition{}
	}
	conflict := metav1.Condition{
		Type:               v1alpha1.ConditionConflicting,
		Status:             metav1.ConditionFalse,
		Reason:             v1alpha1.ReasonNoConflict,
		Message:            fmt.Sprintf("governs the %d node(s) it selects", governed),
		ObservedGeneration: cc.Generation,
		LastTransitionTime: now,
	}
	if len(occupants) > 0 {
		conflict.Status = metav1.ConditionTrue
		conflict.Reason = v1alpha1.ReasonConflict
		conflict.Message = conflictMessage(selected, occupants)
	}
	meta.SetStatusCondition(&st.Conditions, conflict)
	if selErr != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:               v1alpha1.ConditionInvalidNodeSelector,
			Status:             metav1.ConditionTrue,
			Reason:             v1alpha1.ReasonInvalidNodeSelector,
			Message:            "selects no node: " + selErr.Error(),
			ObservedGeneration: cc.Generation,
			LastTransitionTime: now,
		})
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionInvalidNodeSelector)
	}
	return st
}

// conflictMessage names the occupants and the nodes they hold, in name
// order: `selects nodes that older ClusterConfigs govern: "a" governs
// n1, n2; "b" governs n3. It governs none of the 5 node(s) it selects
// until the conflict is resolved`.
func conflictMessage(selected int, occupants map[string][]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(occupants)) {
		nodes := occupants[name]
		list := strings.Join(nodes[:min(len(nodes), maxNamesInMessage)], ", ")
		if len(nodes) > maxNamesInMessage {
			list += fmt.Sprintf(" and %d more", len(nodes)-maxNamesInMessage)
		}
		parts = append(parts, fmt.Sprintf("ClusterConfig %q governs %s", name, list))
	}
	return fmt.Sprintf("selects nodes that ClusterConfigs created before it (or at the same time, with a name sorting first) govern: %s. It governs none of the %d node(s) it selects until the conflict is resolved",
		strings.Join(parts, "; "), selected)
}
