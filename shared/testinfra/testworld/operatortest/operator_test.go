package operatortest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// A ClusterConfig without a selector governs every node, new ones too.
func TestOperator_NilSelectorGovernsEveryNode(t *testing.T) {
	w := newWorld(t)
	w.node("n1", "role=sriov")
	w.node("n2")
	w.clusterConfig("all", nil, spec("all.example.com"))
	w.operator(controller.Options{})

	w.governed("n1", "all")
	w.governed("n2", "all")
	w.status("all", 2, metav1.ConditionFalse)

	w.node("n3", "role=late")
	w.governed("n3", "all")
	w.status("all", 3, metav1.ConditionFalse)
}

// The older ClusterConfig occupies a node first; the newer one conflicts
// and governs none of its nodes, not even those nobody else selects. Once
// the older one is deleted, the newer one takes over and the condition
// clears.
func TestOperator_OlderCreationTimestampWins(t *testing.T) {
	w := newWorld(t)
	w.node("shared", "role=sriov")
	w.node("free", "role=dummy")
	older := w.clusterConfig("z-older", selector("role=sriov"), spec("older.example.com"))
	waitNextSecond(older.CreationTimestamp)
	// Its name sorts first: only the timestamp makes it lose.
	newer := w.clusterConfig("a-newer", nil, spec("newer.example.com"))
	if !older.CreationTimestamp.Before(&newer.CreationTimestamp) {
		t.Fatalf("creation timestamps %v and %v are not ordered", older.CreationTimestamp, newer.CreationTimestamp)
	}
	w.operator(controller.Options{})

	w.governed("shared", "z-older")
	w.status("z-older", 1, metav1.ConditionFalse)
	cond := w.status("a-newer", 0, metav1.ConditionTrue)
	if cond.Reason != v1alpha1.ReasonConflict || !strings.Contains(cond.Message, `ClusterConfig "z-older" governs shared`) {
		t.Errorf("conflict condition %s: %q, want reason %s and a message naming z-older and node shared", cond.Reason, cond.Message, v1alpha1.ReasonConflict)
	}
	t.Logf("conflict message: %s", cond.Message)
	w.sync("shared", "z-older")
	w.ungoverned("free") // a-newer selects it, but conflicts

	w.delete(older)
	w.governed("shared", "a-newer")
	w.governed("free", "a-newer")
	cleared := w.status("a-newer", 2, metav1.ConditionFalse)
	if cleared.Reason != v1alpha1.ReasonNoConflict || cleared.LastTransitionTime.Before(&cond.LastTransitionTime) {
		t.Errorf("cleared condition %+v, want reason %s and a later lastTransitionTime", cleared, v1alpha1.ReasonNoConflict)
	}
}

// ClusterConfigs created in the same second are ordered by name: the one
// created second wins when its name sorts first.
func TestOperator_NameBreaksTie(t *testing.T) {
	w := newWorld(t)
	w.node("n1")
	var first, second *v1alpha1.ClusterConfig
	for attempt := 0; ; attempt++ {
		// Start right after a second boundary, so both land in it.
		waitNextSecond(metav1.Now())
		first = w.clusterConfig("tie-b", nil, spec("b.example.com"))
		second = w.clusterConfig("tie-a", nil, spec("a.example.com"))
		if first.CreationTimestamp.Equal(&second.CreationTimestamp) {
			break
		}
		if attempt == 4 {
			t.Fatalf("could not create two ClusterConfigs in the same second in 5 attempts")
		}
		w.clear()
		w.node("n1")
	}
	w.operator(controller.Options{})

	w.governed("n1", "tie-a")
	w.status("tie-a", 1, metav1.ConditionFalse)
	cond := w.status("tie-b", 0, metav1.ConditionTrue)
	if !strings.Contains(cond.Message, `ClusterConfig "tie-a" governs n1`) {
		t.Errorf("conflict message %q does not name tie-a", cond.Message)
	}
}

// A conflict is resolved by the older ClusterConfig's selector moving away:
// the newer one takes its nodes and its condition turns False.
func TestOperator_ConflictResolutionClearsTheCondition(t *testing.T) {
	w := newWorld(t)
	w.node("n1", "role=sriov")
	w.node("n2")
	older := w.clusterConfig("older", nil, spec("older.example.com"))
	waitNextSecond(older.CreationTimestamp)
	w.clusterConfig("newer", selector("role=sriov"), spec("newer.example.com"))
	w.operator(controller.Options{})

	w.governed("n1", "older")
	w.governed("n2", "older")
	conflict := w.status("newer", 0, metav1.ConditionTrue)

	w.retry(func(ctx context.Context) error {
		var cc v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, key("older"), &cc); err != nil {
			return err
		}
		cc.Spec.NodeSelector = selector("role=nothing")
		return w.c.Update(ctx, &cc)
	})
	w.governed("n1", "newer")
	w.ungoverned("n2")
	w.status("older", 0, metav1.ConditionFalse)
	cleared := w.status("newer", 1, metav1.ConditionFalse)
	if cleared.Reason != v1alpha1.ReasonNoConflict {
		t.Errorf("cleared condition reason %s, want %s", cleared.Reason, v1alpha1.ReasonNoConflict)
	}
	if cleared.LastTransitionTime.Before(&conflict.LastTransitionTime) {
		t.Errorf("lastTransitionTime went back: %v -> %v", conflict.LastTransitionTime, cleared.LastTransitionTime)
	}
}

// Relabelling a node moves it to the ClusterConfig that now selects it;
// removing the label leaves it unconfigured.
func TestOperator_LabelChangeMovesNode(t *testing.T) {
	w := newWorld(t)
	w.node("n1", "pool=a")
	w.clusterConfig("a", selector("pool=a"), spec("a.example.com"))
	w.clusterConfig("b", selector("pool=b"), spec("b.example.com"))
	w.operator(controller.Options{})

	w.governed("n1", "a")
	w.status("a", 1, metav1.ConditionFalse)
	w.status("b", 0, metav1.ConditionFalse)

	w.label("n1", "pool=b")
	w.governed("n1", "b")
	w.status("a", 0, metav1.ConditionFalse)
	w.status("b", 1, metav1.ConditionFalse)

	w.label("n1", "pool-")
	w.ungoverned("n1")
	w.status("b", 0, metav1.ConditionFalse)
}

// Edits to a generated NodeConfig are overwritten; a deleted one comes
// back; one stripped of the operator's labels is taken back.
func TestOperator_DriftOverwritten(t *testing.T) {
	w := newWorld(t)
	w.node("n1")
	w.clusterConfig("all", nil, spec("all.example.com"))
	w.operator(controller.Options{})
	w.governed("n1", "all")

	w.retry(func(ctx context.Context) error {
		var nc v1alpha1.NodeConfig
		if err := w.c.Get(ctx, key("n1"), &nc); err != nil {
			return err
		}
		nc.Spec.Pools = append(nc.Spec.Pools, v1alpha1.Pool{Name: "edited-by-hand"})
		nc.Spec.DeviceManagerConfigs.Dummy.Count = 7
		return w.c.Update(ctx, &nc)
	})
	w.governed("n1", "all")

	w.retry(func(ctx context.Context) error {
		var nc v1alpha1.NodeConfig
		if err := w.c.Get(ctx, key("n1"), &nc); err != nil {
			return err
		}
		nc.Labels = map[string]string{"owner": "me"}
		return w.c.Update(ctx, &nc)
	})
	nc := w.governed("n1", "all")
	if nc.Labels["owner"] != "me" {
		t.Errorf("the take-over dropped a foreign label: %v", nc.Labels)
	}

	w.delete(nc)
	w.governed("n1", "all")
}

// A deleted node's generated NodeConfig is deleted.
func TestOperator_NodeDeletion(t *testing.T) {
	w := newWorld(t)
	w.node("n1")
	w.node("n2")
	w.clusterConfig("all", nil, spec("all.example.com"))
	w.operator(controller.Options{})
	w.governed("n1", "all")
	w.governed("n2", "all")
	w.status("all", 2, metav1.ConditionFalse)

	var n2 corev1.Node
	w.get("n2", &n2)
	w.delete(&n2)
	w.ungoverned("n2")
	w.governed("n1", "all")
	w.status("all", 1, metav1.ConditionFalse)
}

// Deleting a ClusterConfig deletes the NodeConfigs it generated.
func TestOperator_ClusterConfigDeletion(t *testing.T) {
	w := newWorld(t)
	w.node("n1")
	w.node("n2")
	cc := w.clusterConfig("all", nil, spec("all.example.com"))
	w.operator(controller.Options{})
	w.governed("n1", "all")
	w.governed("n2", "all")

	w.delete(cc)
	w.ungoverned("n1")
	w.ungoverned("n2")
}

// A hand-made NodeConfig for a node no ClusterConfig selects, or for no
// node at all, is left alone; once a ClusterConfig selects its node, the
// operator takes it over.
func TestOperator_HandMadeNodeConfig(t *testing.T) {
	w := newWorld(t)
	w.node("n1", "role=sriov")
	w.node("h1")
	mine := spec("mine.example.com")
	for _, name := range []string{"h1", "no-such-node"} {
		nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"owner": "me"}}, Spec: mine}
		if err := w.c.Create(context.Background(), nc); err != nil {
			t.Fatal(err)
		}
	}
	var h1Before, ghostBefore v1alpha1.NodeConfig
	w.get("h1", &h1Before)
	w.get("no-such-node", &ghostBefore)
	w.clusterConfig("sriov", selector("role=sriov"), spec("sriov.example.com"))
	w.operator(controller.Options{})

	w.governed("n1", "sriov")
	w.sync("n1", "sriov")
	var h1, ghost v1alpha1.NodeConfig
	w.get("h1", &h1)
	w.get("no-such-node", &ghost)
	if h1.ResourceVersion != h1Before.ResourceVersion || ghost.ResourceVersion != ghostBefore.ResourceVersion {
		t.Fatalf("the operator wrote hand-made NodeConfigs: h1 %s -> %s, no-such-node %s -> %s",
			h1Before.ResourceVersion, h1.ResourceVersion, ghostBefore.ResourceVersion, ghost.ResourceVersion)
	}

	w.label("h1", "role=sriov")
	taken := w.governed("h1", "sriov")
	if taken.Labels["owner"] != "me" {
		t.Errorf("the take-over dropped a foreign label: %v", taken.Labels)
	}
	w.status("sriov", 2, metav1.ConditionFalse)
	w.get("no-such-node", &ghost)
	if ghost.ResourceVersion != ghostBefore.ResourceVersion {
		t.Errorf("the operator wrote the NodeConfig of a node that does not exist")
	}
}

// The periodic refresh re-checks what no watch event reports: a status
// written by hand (status writes trigger no reconcile) is put back.
func TestOperator_PeriodicRefresh(t *testing.T) {
	w := newWorld(t)
	w.node("n1")
	w.clusterConfig("all", nil, spec("all.example.com"))
	w.operator(controller.Options{Refresh: 2 * time.Second})
	w.governed("n1", "all")
	w.status("all", 1, metav1.ConditionFalse)

	w.retry(func(ctx context.Context) error {
		var cc v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, key("all"), &cc); err != nil {
			return err
		}
		cc.Status.Nodes = 42
		cc.Status.Conditions[0].Status = metav1.ConditionTrue
		cc.Status.Conditions[0].Reason = "EditedByHand"
		return w.c.Status().Update(ctx, &cc)
	})
	w.status("all", 1, metav1.ConditionFalse)
}
