package nodeconfig

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// TestHandle_Events: a generation applied records no event (its Applied
// condition says so: an event would be a write per node at every
// cluster-wide change); one that cannot be applied records a Warning once,
// not at every retry; an invalid one a Warning.
func TestHandle_Events(t *testing.T) {
	c, _ := patchCountingClient()
	events := record.NewFakeRecorder(10)
	var applyErr error
	w := NewWatcher(slog.New(slog.DiscardHandler), c, events, NewStatusWriter(slog.New(slog.DiscardHandler), c, "n1"), "n1",
		func(context.Context, *v1alpha1.NodeConfigSpec, int64) error { return applyErr })
	nc := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "n1", Generation: 1}, Spec: v1alpha1.NodeConfigSpec{DriverName: "netdra.io"}}
	ctx := context.Background()
	recorded := func() []string {
		var out []string
		for {
			select {
			case e := <-events.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	if !w.handle(ctx, nc) {
		t.Fatal("a valid generation was not applied")
	}
	if got := recorded(); len(got) != 0 {
		t.Errorf("events for a generation applied: %q, want none", got)
	}
	applyErr = errors.New("the PF is gone")
	if w.handle(ctx, nc) {
		t.Fatal("a failed apply reported applied")
	}
	if got := recorded(); len(got) != 1 {
		t.Errorf("events for a failed apply: %q, want one Warning", got)
	}
	nc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonApplyFailed, Message: applyErr.Error(), ObservedGeneration: 1}}
	w.handle(ctx, nc)
	if got := recorded(); len(got) != 0 {
		t.Errorf("events for the same failure again: %q, want none", got)
	}
	nc.Generation, nc.Spec.Pools = 2, []v1alpha1.Pool{{Name: "bad name!"}}
	w.handle(ctx, nc)
	if got := recorded(); len(got) != 1 {
		t.Errorf("events for an invalid generation: %q, want one Warning", got)
	}
}
