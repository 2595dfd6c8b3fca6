package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// deviceTaints returns the taints published for device on node, and
// whether the device is published at all.
func deviceTaints(ctx context.Context, c kubernetes.Interface, node, device string) ([]resourceapi.DeviceTaint, bool, error) {
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, false, err
	}
	for _, s := range slices.Items {
		if s.Spec.Driver != driver || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				return d.Taints, true, nil
			}
		}
	}
	return nil, false, nil
}

// TestE2E_DeviceTaint: a host device whose veth peer goes down (no
// carrier) gets the netdra.io/unhealthy NoSchedule taint in its
// ResourceSlice, read back from the real apiserver (which sets its
// timeAdded); the taint goes when the peer is up again.
func TestE2E_DeviceTaint(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	taint := func(what string, want bool) {
		t.Helper()
		waitFor(t, what, 2*time.Minute, func(ctx context.Context) (bool, error) {
			taints, ok, err := deviceTaints(ctx, c, nn.node.Name(), "data0")
			if err != nil || !ok {
				return false, err
			}
			if !want {
				return len(taints) == 0, nil
			}
			if len(taints) != 1 {
				return false, nil
			}
			tt := taints[0]
			if tt.Key != "netdra.io/unhealthy" || tt.Effect != resourceapi.DeviceTaintEffectNoSchedule || tt.TimeAdded == nil {
				return false, fmt.Errorf("taint %+v, want netdra.io/unhealthy NoSchedule with a timeAdded", tt)
			}
			return true, nil
		})
	}
	taint("data0 published untainted while administratively down", false)
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "data0", "up") // its peer p-data0 is down: no carrier
	taint("data0 tainted without a carrier", true)
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-data0", "up")
	taint("data0's taint removed with its link up", false)
}
