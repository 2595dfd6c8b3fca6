package nodeconfig

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

func readStatus(t *testing.T, c *dynamicfake.FakeDynamicClient) (v1alpha1.NodeConfigStatus, bool) {
	t.Helper()
	u, err := c.Resource(NodeConfigsResource).Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		return v1alpha1.NodeConfigStatus{}, false
	}
	nc := &v1alpha1.NodeConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, nc); err != nil {
		t.Fatal(err)
	}
	return nc.Status, true
}

// TestStatusWriter: the owned status is written whole (a pool that is
// gone is gone), once for a burst of changes, not again when unchanged,
// and again when the NodeConfig was re-created (Check).
func TestStatusWriter(t *testing.T) {
	c, patches := patchCountingClient()
	nc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "netdra.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": "n1"}, "spec": map[string]any{"driverName": "netdra.io"}}}
	if _, err := c.Resource(NodeConfigsResource).Create(context.Background(), nc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := NewStatusWriter(slog.New(slog.DiscardHandler), c, "n1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()

	waitStatus := func(what string, want v1alpha1.NodeConfigStatus) {
		t.Helper()
		waitForStatus(t, c, what, want)
	}
	applied := metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied,
		LastTransitionTime: metav1.NewTime(time.Unix(1000, 0))}
	// A burst of changes, one write.
	w.SetConditions(3, nil, applied)
	w.SetDriverName("netdra.io")
	time.Sleep(statusQuiet / 4)
	w.SetPublished([]v1alpha1.PoolStatus{{Name: "blue", Devices: 2}, {Name: "red", Devices: 0}})
	waitStatus("first write", v1alpha1.NodeConfigStatus{ObservedGeneration: 3, Conditions: []metav1.Condition{applied},
		Pools: 2, PublishedPools: []v1alpha1.PoolStatus{{Name: "blue", Devices: 2}, {Name: "red"}}, DriverName: "netdra.io"})
	if got := patches.Load(); got != 1 {
		t.Errorf("%d patches for one burst of changes, want 1", got)
	}
	w.SetPublished([]v1alpha1.PoolStatus{{Name: "green", Devices: 1}})
	want := v1alpha1.NodeConfigStatus{ObservedGeneration: 3, Conditions: []metav1.Condition{applied},
		Pools: 1, PublishedPools: []v1alpha1.PoolStatus{{Name: "green", Devices: 1}}, DriverName: "netdra.io"}
	waitStatus("pools replaced", want)

	// Unchanged: no write. A new pool list written after it shows no
	// patch came in between.
	n := patches.Load()
	w.SetPublished([]v1alpha1.PoolStatus{{Name: "green", Devices: 1}})
	w.Check(want)
	w.SetPublished([]v1alpha1.PoolStatus{{Name: "green", Devices: 2}})
	want.PublishedPools[0].Devices = 2
	waitStatus("a real change", want)
	if got := patches.Load() - n; got != 1 {
		t.Errorf("%d patches for one change", got)
	}

	// Re-created with an empty status: written again.
	if err := c.Resource(NodeConfigsResource).Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resource(NodeConfigsResource).Create(context.Background(), nc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Check(v1alpha1.NodeConfigStatus{})
	waitStatus("after re-creation", want)
}

// patchCountingClient is a fake dynamic client that knows NodeConfigs and
// counts the patches made through it.
func patchCountingClient() (*dynamicfake.FakeDynamicClient, *atomic.Int32) {
	c := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{NodeConfigsResource: "NodeConfigList"})
	patches := &atomic.Int32{}
	c.PrependReactor("patch", "nodeconfigs", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	return c, patches
}

// waitForStatus waits until the NodeConfig's status in c is want, and
// fails the test, saying what was awaited, once its deadline passed.
func waitForStatus(t *testing.T, c *dynamicfake.FakeDynamicClient, what string, want v1alpha1.NodeConfigStatus) {
	t.Helper()
	var got v1alpha1.NodeConfigStatus
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got, _ = readStatus(t, c); statusEqual(got, want) {
			return
		}
	}
	t.Fatalf("%s: status (-want +got):\n%s", what, cmp.Diff(want, got))
}

// TestStatusWriter_KeepsSetCondition: a condition SetCondition set stays
// through a SetConditions whose base (the NodeConfig as read) does not
// have it yet, and through one whose base has an older version of it.
func TestStatusWriter_KeepsSetCondition(t *testing.T) {
	w := NewStatusWriter(slog.New(slog.DiscardHandler), nil, "n1")
	waiting := ManagersCondition(2, map[string][]string{"sr-iov": {"PF eth1: vfCount 4 waits until its allocated VF is freed (it keeps its 2 VFs until then)"}})
	w.SetCondition(waiting)
	applied := metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied}
	settled := ManagersCondition(1, nil)
	for _, base := range [][]metav1.Condition{nil, {settled}} {
		w.SetConditions(3, base, applied)
		w.mu.Lock()
		got := meta.FindStatusCondition(w.want.Conditions, v1alpha1.ConditionDeviceManagersSettled)
		w.mu.Unlock()
		if got == nil || got.Status != metav1.ConditionFalse || got.Message != waiting.Message {
			t.Errorf("base %v: DeviceManagersSettled %+v, want the one SetCondition set", base, got)
		}
	}
}
