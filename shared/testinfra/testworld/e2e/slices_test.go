package e2e

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestE2E_SlicesKeptAsPublished: dra's ResourceSlices stay as it published
// them against the real apiserver: a slice someone edits is written back, a
// slice someone deletes is created again, and a slice of the node's pool
// that dra did not write (an older publisher's) is deleted, each time with
// the pool's slices on one generation and counted right.
func TestE2E_SlicesKeptAsPublished(t *testing.T) {
	nn := startNetdra(t, "data0", "data1")
	c := nn.cp.Client()
	node := nn.node.Name()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0", "data1"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	// asPublished waits for the pool as dra publishes it, in a slice that
	// is not the one named (a deleted one) nor at the resource version
	// given (an edited one).
	asPublished := func(what, notName, notVersion string) *resourceapi.ResourceSlice {
		t.Helper()
		var last []resourceapi.ResourceSlice
		waitFor(t, what, 2*time.Minute, func(ctx context.Context) (bool, error) {
			var err error
			last, err = nodeSlices(ctx, c, node)
			return err == nil && len(last) == 1 && len(last[0].Spec.Devices) == 2 &&
				last[0].Spec.Pool.ResourceSliceCount == 1 && last[0].Spec.Pool.Name == node+"/net" &&
				last[0].Name != notName && last[0].ResourceVersion != notVersion, nil
		})
		return &last[0]
	}
	s := asPublished("the pool published: one slice with both devices", "", "")

	edited := s.DeepCopy()
	edited.Spec.Devices = edited.Spec.Devices[:1]
	edited, err := c.ResourceV1().ResourceSlices().Update(context.Background(), edited, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s = asPublished("the edited slice written back", "", edited.ResourceVersion)
	if s.Name != edited.Name {
		t.Errorf("the edited slice %s was replaced by %s; want it updated", edited.Name, s.Name)
	}

	if err := c.ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s = asPublished("the deleted slice created again", s.Name, "")

	// An older publisher's slice of the pool, at the current generation.
	foreign := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "0-" + driver + "-" + node + "-older"},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: s.Spec.Pool,
			Devices: []resourceapi.Device{{Name: "stale"}}},
	}
	if _, err := c.ResourceV1().ResourceSlices().Create(context.Background(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the older publisher's slice deleted", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := c.ResourceV1().ResourceSlices().Get(ctx, foreign.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	got := asPublished("the pool as published after it", "", s.ResourceVersion)
	if got.Spec.Pool.Generation <= s.Spec.Pool.Generation {
		t.Errorf("the pool's generation stayed at %d with another slice deleted; want the next one", got.Spec.Pool.Generation)
	}
}

// nodeSlices returns netdra's ResourceSlices of node.
func nodeSlices(ctx context.Context, c kubernetes.Interface, node string) ([]resourceapi.ResourceSlice, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + driver})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}
