package plan

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Actions are the writes that take the cluster to a Result.
type Actions struct {
	// Create are NodeConfigs to create.
	Create []*v1alpha1.NodeConfig
	// Update are existing NodeConfigs (copies, resourceVersion kept) with
	// the assigned spec and the operator's labels: drift being overwritten,
	// a moved node, or a hand-made NodeConfig taken over.
	Update []*v1alpha1.NodeConfig
	// Delete are the operator's NodeConfigs that nothing assigns.
	Delete []*v1alpha1.NodeConfig
	// Status are ClusterConfigs (copies, resourceVersion kept) whose
	// status changes.
	Status []*v1alpha1.ClusterConfig
}

// Empty reports whether there is nothing to write.
func (a Actions) Empty() bool {
	return len(a.Create)+len(a.Update)+len(a.Delete)+len(a.Status) == 0
}

// Diff returns the writes that take existing NodeConfigs and configs'
// statuses to res. Each list is sorted by name. The inputs are not
// modified.
func Diff(res Result, existing []v1alpha1.NodeConfig, configs []v1alpha1.ClusterConfig) Actions {
	var acts Actions
	have := map[string]*v1alpha1.NodeConfig{}
	for i := range existing {
		have[existing[i].Name] = &existing[i]
	}
	for _, node := range slices.Sorted(maps.Keys(res.Assignments)) {
		a := res.Assignments[node]
		nc, ok := have[node]
		if !ok {
			acts.Create = append(acts.Create, Generate(node, a))
			continue
		}
		if !Owned(nc, a.ClusterConfig) || !sameSpec(&nc.Spec, a.Spec) {
			up := nc.DeepCopy()
			up.Labels = maps.Clone(up.Labels)
			if up.Labels == nil {
				up.Labels = map[string]string{}
			}
			up.Labels[v1alpha1.LabelManagedBy] = v1alpha1.ManagedByOperator
			up.Labels[v1alpha1.LabelClusterConfig] = a.ClusterConfig
			up.Spec = *a.Spec.DeepCopy()
			acts.Update = append(acts.Update, up)
		}
	}
	for _, nc := range existing {
		if _, assigned := res.Assignments[nc.Name]; !assigned && nc.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByOperator {
			acts.Delete = append(acts.Delete, nc.DeepCopy())
		}
	}
	slices.SortFunc(acts.Delete, func(a, b *v1alpha1.NodeConfig) int { return strings.Compare(a.Name, b.Name) })
	for _, cc := range configs {
		st, ok := res.Statuses[cc.Name]
		if !ok || equality.Semantic.DeepEqual(cc.Status, st) {
			continue
		}
		up := cc.DeepCopy()
		up.Status = *st.DeepCopy()
		acts.Status = append(acts.Status, up)
	}
	slices.SortFunc(acts.Status, func(a, b *v1alpha1.ClusterConfig) int { return strings.Compare(a.Name, b.Name) })
	return acts
}

// Generate returns the NodeConfig the operator writes for node under a.
func Generate(node string, a Assignment) *v1alpha1.NodeConfig {
	return &v1alpha1.NodeConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeConfig"},
		ObjectMeta: metav1.ObjectMeta{
			Name: node,
			Labels: map[string]string{
				v1alpha1.LabelManagedBy:     v1alpha1.ManagedByOperator,
				v1alpha1.LabelClusterConfig: a.ClusterConfig,
			},
		},
		Spec: *a.Spec.DeepCopy(),
	}
}

// Owned reports whether nc carries the operator's labels for the
// ClusterConfig named clusterConfig.
func Owned(nc *v1alpha1.NodeConfig, clusterConfig string) bool {
	return nc.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByOperator &&
		nc.Labels[v1alpha1.LabelClusterConfig] == clusterConfig
}

// sameSpec compares two specs as their JSON: what the API server stores,
// where an empty list and an absent one are the same.
func sameSpec(a, b *v1alpha1.NodeConfigSpec) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
