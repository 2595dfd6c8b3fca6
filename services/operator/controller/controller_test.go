package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// TestReconcile drives the client code against controller-runtime's fake
// client; the rules themselves are tested in package plan, and against a
// real apiserver in shared/testinfra/testworld/operatortest.
func TestReconcile(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	spec := v1alpha1.NodeConfigSpec{DriverName: "a.example.com", Pools: []v1alpha1.Pool{{Name: "p"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&v1alpha1.ClusterConfig{}).
		WithObjects(
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"sriov": "yes"}}},
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
			&v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: t0},
				Spec: v1alpha1.ClusterConfigSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sriov": "yes"}}, Spec: spec}},
			&v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: metav1.NewTime(t0.Add(time.Second))}},
			// Operator-made, for a node that is gone.
			&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "gone", Labels: map[string]string{
				v1alpha1.LabelManagedBy: v1alpha1.ManagedByOperator, v1alpha1.LabelClusterConfig: "a"}}},
			// Hand-made, for a node nothing selects.
			&v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: v1alpha1.NodeConfigSpec{DriverName: "mine.example.com"}},
		).Build()
	r := &Reconciler{Client: c, Log: slog.New(slog.DiscardHandler), Refresh: time.Minute}
	ctx := context.Background()
	res, err := r.Reconcile(ctx, everything)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if res.RequeueAfter != time.Minute {
		t.Errorf("RequeueAfter %v, want the refresh period", res.RequeueAfter)
	}

	var ncs v1alpha1.NodeConfigList
	if err := c.List(ctx, &ncs); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, nc := range ncs.Items {
		got[nc.Name] = nc.Labels[v1alpha1.LabelClusterConfig] + " " + nc.Spec.DriverName
	}
	want := map[string]string{"n1": "a a.example.com", "mine": " mine.example.com"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NodeConfigs (-want +got):\n%s", diff)
	}

	var b v1alpha1.ClusterConfig
	if err := c.Get(ctx, client.ObjectKey{Name: "b"}, &b); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionConflicting)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonConflict {
		t.Errorf("b's conflict condition is %+v, want True/%s", cond, v1alpha1.ReasonConflict)
	}

	// A second pass over a settled cluster writes nothing.
	before := resourceVersions(t, c)
	if _, err := r.Reconcile(ctx, everything); err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if diff := cmp.Diff(before, resourceVersions(t, c)); diff != "" {
		t.Errorf("the second pass wrote (-before +after):\n%s", diff)
	}
}

func resourceVersions(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	var ncs v1alpha1.NodeConfigList
	var ccs v1alpha1.ClusterConfigList
	if err := c.List(context.Background(), &ncs); err != nil {
		t.Fatal(err)
	}
	if err := c.List(context.Background(), &ccs); err != nil {
		t.Fatal(err)
	}
	for _, nc := range ncs.Items {
		out["NodeConfig/"+nc.Name] = nc.ResourceVersion
	}
	for _, cc := range ccs.Items {
		out["ClusterConfig/"+cc.Name] = cc.ResourceVersion
	}
	return out
}

// TestReconcile_WritesNodeConfigsInParallel: a ClusterConfig governing
// many nodes has their NodeConfigs written several at a time, each one
// once, and a failed write fails the reconcile without keeping the others
// from being made.
func TestReconcile_WritesNodeConfigsInParallel(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	const nodes = 64
	objs := []client.Object{&v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec: v1alpha1.ClusterConfigSpec{Spec: v1alpha1.NodeConfigSpec{Pools: []v1alpha1.Pool{{Name: "p"}}}}}}
	for i := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%02d", i)}})
	}
	var inFlight, most atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.ClusterConfig{}).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond) // the apiserver's round trip
			if obj.GetName() == "n13" {
				return errors.New("refused")
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	r := &Reconciler{Client: c, Log: slog.New(slog.DiscardHandler)}
	_, err := r.Reconcile(context.Background(), everything)
	if err == nil || !strings.Contains(err.Error(), "create NodeConfig n13: refused") {
		t.Errorf("Reconcile: %v, want n13's create to fail it", err)
	}
	var ncs v1alpha1.NodeConfigList
	if err := c.List(context.Background(), &ncs); err != nil {
		t.Fatal(err)
	}
	if len(ncs.Items) != nodes-1 {
		t.Errorf("%d NodeConfigs, want %d (all but n13's)", len(ncs.Items), nodes-1)
	}
	if m := most.Load(); m < 2 || m > writeParallelism {
		t.Errorf("at most %d writes in flight at once, want 2 to %d", m, writeParallelism)
	}
}

// staleReads is a client whose reads come from reader (a cache that has
// not caught up) and whose writes go to the embedded client.
type staleReads struct {
	client.Client
	reader client.Reader
}

func (s staleReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return s.reader.List(ctx, list, opts...)
}

// A reconcile that comes before the cache shows the reconciler's own
// writes plans from those writes: no create is made again (refused as
// existing) and an update carries the written resource version (no
// conflict).
func TestReconcile_OwnWritesBeforeTheCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cc := func(pool string) *v1alpha1.ClusterConfig {
		return &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Spec: v1alpha1.ClusterConfigSpec{Spec: v1alpha1.NodeConfigSpec{Pools: []v1alpha1.Pool{{Name: pool}}}}}
	}
	nodes := []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}}
	var writes atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.ClusterConfig{}).
		WithObjects(append(nodes, cc("p"))...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				writes.Add(1)
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if _, ok := obj.(*v1alpha1.NodeConfig); ok {
					writes.Add(1)
				}
				return c.Update(ctx, obj, opts...)
			},
		}).Build()
	// The cache: the Nodes and the ClusterConfig, none of the writes.
	stale := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(nodes, cc("p"))...).Build()
	r := &Reconciler{Client: staleReads{Client: c, reader: stale}, Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, everything); err != nil {
		t.Fatalf("first Reconcile: %v", err)
	}
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d NodeConfig writes, want 2 creates", n)
	}
	if _, err := r.Reconcile(ctx, everything); err != nil {
		t.Fatalf("Reconcile before the cache shows the creates: %v", err)
	}
	if n := writes.Load(); n != 2 {
		t.Errorf("%d NodeConfig writes after a second reconcile, want still 2", n)
	}
	// The ClusterConfig changes; the cache shows that (and so the status
	// written before it), not the creates.
	var cur v1alpha1.ClusterConfig
	if err := c.Get(ctx, client.ObjectKey{Name: "a"}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec = cc("q").Spec
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	r.Client = staleReads{Client: c, reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(nodes, &cur)...).Build()}
	if _, err := r.Reconcile(ctx, everything); err != nil {
		t.Fatalf("Reconcile of the change: %v", err)
	}
	var ncs v1alpha1.NodeConfigList
	if err := c.List(ctx, &ncs); err != nil {
		t.Fatal(err)
	}
	for _, nc := range ncs.Items {
		if len(nc.Spec.Pools) != 1 || nc.Spec.Pools[0].Name != "q" {
			t.Errorf("NodeConfig %s pools %+v, want q", nc.Name, nc.Spec.Pools)
		}
	}
}
