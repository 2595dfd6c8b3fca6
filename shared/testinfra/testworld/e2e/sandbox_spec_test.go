package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// TestE2E_ContainerdRecoversSandboxWithoutSpec: containerd killed between
// its start of a pod's sandbox and its record of the sandbox's spec
// recovers the sandbox running, and describes it to NRI plugins without
// any namespace, its netns included (the chaos run's pod that never ran:
// nri took it for a host-network pod and never attached its device). Made
// here by deleting the sandboxes' specs from containerd's metadata while
// it is down. nri, synchronized with the restarted containerd, still knows
// the pod's netns, found from the sandbox's process: the pod keeps its
// device (a pod nri does not know is gone, and its devices are detached).
func TestE2E_ContainerdRecoversSandboxWithoutSpec(t *testing.T) {
	w := startRestartWorld(t)
	ctx := context.Background()
	netns := w.netns(t)
	w.nn.node.Kill("containerd")
	if n := stripSandboxSpecs(t, filepath.Join(w.nn.node.Dir(), "containerd", "root", "io.containerd.metadata.v1.bolt", "meta.db")); n == 0 {
		t.Fatal("no sandbox spec in containerd's metadata")
	}
	syncs := strings.Count(w.nn.nriP.Log(), `"msg":"Synchronized"`)
	if err := w.nn.node.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nri to synchronize with the restarted containerd", time.Minute, func(context.Context) (bool, error) {
		return strings.Count(w.nn.nriP.Log(), `"msg":"Synchronized"`) > syncs, nil
	})
	conn, err := rpc.Dial(w.nn.nriP.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := nriv1.NewNriServiceClient(conn).Status(ctx, &nriv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join("/var/run/netns", netns)
	found := false
	for _, p := range st.GetPods() {
		found = found || p.GetUid() == string(w.pod.UID) && p.GetNetnsPath() == want
	}
	if !found {
		t.Fatalf("nri's pods after the restart: %v; want %s in %s", st.GetPods(), w.pod.UID, want)
	}
	// The reconciliation after Synchronize detaches the devices of the
	// pods nri does not know: give it the time it takes (milliseconds) many
	// times over, then the pod must still hold its device.
	time.Sleep(3 * time.Second)
	w.stillHasNet1(t)
	resp, err := w.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: string(w.pod.UID)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetAllocations()) != 1 || resp.GetAllocations()[0].GetPhase() != statev1.Phase_PHASE_ATTACHED {
		t.Errorf("the pod's allocations: %v, want one, attached", resp.GetAllocations())
	}
}

// stripSandboxSpecs deletes the spec of every sandbox of the k8s.io
// namespace in containerd's metadata database at path (containerd down),
// as a containerd killed before it recorded them leaves them; it returns
// how many it deleted.
func stripSandboxSpecs(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	err = db.Update(func(tx *bolt.Tx) error {
		sandboxes := tx.Bucket([]byte("v1")).Bucket([]byte("k8s.io")).Bucket([]byte("sandboxes"))
		if sandboxes == nil {
			return nil
		}
		return sandboxes.ForEachBucket(func(id []byte) error {
			b := sandboxes.Bucket(id)
			if b.Get([]byte("spec")) == nil {
				return nil
			}
			n++
			return b.Delete([]byte("spec"))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
