package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// healthOf returns the health and message the report gives device of pool.
func healthOf(r *drahealthv1.NodeWatchResourcesResponse, pool, device string) (drahealthv1.HealthStatus, string, bool) {
	for _, d := range r.GetDevices() {
		if d.GetDevice().GetPoolName() == pool && d.GetDevice().GetDeviceName() == device {
			return d.GetHealth(), d.GetMessage(), true
		}
	}
	return 0, "", false
}

// TestE2E_DraHealth: dra's device health, read as the kubelet reads it (the
// DRAResourceHealth v1 stream on the plugin's socket, which the real
// kubelet reads too: TestE2E_HealthInPodStatus follows it into a pod's
// status; here no pod is needed to see every state): a host device is healthy while its link is
// up or administratively down, unhealthy when it loses its carrier (its
// veth peer down) and when it vanishes from the node.
func TestE2E_DraHealth(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	waitFor(t, "pool net with data0", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, c, nn.node.Name())
		return err == nil && p["net"] == 1, nil
	})
	conn, err := grpc.NewClient("unix://"+filepath.Join(nn.dir, "plugins", driver, "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stream, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// expect reads reports until data0 has the health and message wanted.
	expect := func(what string, want drahealthv1.HealthStatus, wantMsg string) {
		t.Helper()
		var last string
		for {
			r, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for %s (last: %s): %v", what, last, err)
			}
			h, msg, ok := healthOf(r, nn.node.Name()+"/net", "data0")
			last = fmt.Sprintf("%v %q %v", h, msg, ok)
			if ok && h == want && msg == wantMsg {
				return
			}
		}
	}
	expect("data0 healthy while down and unused", drahealthv1.HealthStatus_HEALTHY, "present; link administratively down (not in use)")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "data0", "up")
	expect("data0 unhealthy without a carrier", drahealthv1.HealthStatus_UNHEALTHY, "link down: no carrier")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-data0", "up")
	expect("data0 healthy with its link up", drahealthv1.HealthStatus_HEALTHY, "link up")
	nodetest.IP(t, "-n", nn.hostNS, "link", "del", "data0")
	expect("data0 unhealthy once it vanished", drahealthv1.HealthStatus_UNHEALTHY, "vanished from the node's inventory")
}
