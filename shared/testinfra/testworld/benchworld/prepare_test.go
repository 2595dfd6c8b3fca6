package benchworld

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// claimsPerSize is how many claims are prepared (and unprepared) back to
// back for each number of devices a claim; pacedClaims how many are
// prepared pace apart, long enough for dra's client-side rate limiter
// (client-go's default: 5 requests a second, bursts of 10) to refill, which
// shows what a prepare costs when the limiter is not what it waits for.
const (
	claimsPerSize = 20
	pacedClaims   = 8
	pace          = 2500 * time.Millisecond
)

// BenchmarkWorld_Prepare measures what the kubelet waits for when it
// prepares a claim: NodePrepareResources on dra's plugin socket (the
// kubelet's DRA v1 protocol) for one claim of 1 or 8 devices (host veths,
// one request a device, each with its own pod interface name), which GETs
// the claim and its pod, records the intent in the state service, sets the
// devices up in the provisioner and commits (dra writes the claim status
// after it answered); then NodeUnprepareResources. The claims and their pods are
// real objects in the apiserver; the allocation the scheduler would write
// is written by this benchmark (the pods carry a scheduling gate, so the
// world's kubelet never runs them and only this benchmark talks to dra).
// With $NETDRA_BENCH_BASELINE_DRA naming another build of dra, each row
// runs in turns with it (docs/testing.md) and records nothing.
func BenchmarkWorld_Prepare(b *testing.B) {
	nn := startNetdra(b)
	var names []any
	for i := range 8 {
		name := fmt.Sprintf("bw%d", i)
		nodetest.IP(b, "-n", nn.hostNS, "link", "add", name, "address", fmt.Sprintf("02:00:00:00:0b:%02x", i),
			"mtu", "1500", "type", "veth", "peer", "name", "p-"+name)
		names = append(names, name)
	}
	nn.applyNodeConfig(b, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": names}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	c := nn.cp.Client()
	devices := waitDevices(b, c, nn.node.Name(), "net", 8)
	nn.recordRSS(b, "idle", "the prepare world (point 2): 8 host devices published, nothing prepared")
	ns := worldtest.Namespace(b, c)
	sock := filepath.Join(nn.dir, "plugins", driver, "dra.sock")
	product, baseline := "", os.Getenv("NETDRA_BENCH_BASELINE_DRA")
	if baseline != "" {
		product = filepath.Join(nodetest.Binaries(b), "dra")
	}
	for _, v := range []struct {
		n     int
		paced bool
	}{{1, false}, {8, false}, {1, true}, {8, true}} {
		n, name, claims := v.n, fmt.Sprintf("devices=%d", v.n), claimsPerSize
		if v.paced {
			name, claims = name+"/paced", pacedClaims
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				var prep, unprep, basePrep []time.Duration
				if baseline == "" {
					prep, unprep = prepareClaims(b, c, sock, ns, nn.node.Name(), devices[:n], v.paced, 0, claims)
				} else {
					// In turns, product, baseline, baseline, product, so
					// that the machine's load falls on both alike.
					for round, bin := range []string{product, baseline, baseline, product} {
						if round != 2 {
							nn.dra.RestartBinary(bin)
						}
						p, u := prepareClaims(b, c, sock, ns, nn.node.Name(), devices[:n], v.paced, round*claims, claims/4)
						if bin == baseline {
							basePrep = append(basePrep, p...)
						} else {
							prep, unprep = append(prep, p...), append(unprep, u...)
						}
					}
				}
				p := figures.Prepare{Devices: n, Paced: v.paced, Prepare: figures.Summarize(prep), Unprepare: figures.Summarize(unprep)}
				b.ReportMetric(p.Prepare.P50, "prepare-p50-ms")
				b.ReportMetric(p.Prepare.P99, "prepare-p99-ms")
				b.ReportMetric(p.Unprepare.P50, "unprepare-p50-ms")
				if baseline != "" {
					base := figures.Summarize(basePrep)
					b.ReportMetric(base.P50, "base-prepare-p50-ms")
					b.ReportMetric(base.P99, "base-prepare-p99-ms")
					b.ReportMetric(p.Prepare.P50/base.P50, "prepare-p50-new/base")
				} else if err := figures.Record(figures.PrepareFile, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	nn.recordRSS(b, "after prepare", fmt.Sprintf("the prepare world (point 2) after %d prepares and unprepares", 2*claimsPerSize+2*pacedClaims))
}

// prepareClaims prepares and unprepares count claims of devices, one after
// the other, through NodePrepareResources on dra's plugin socket sock, as
// the kubelet calls it, and returns how long each call took. first numbers
// the claims' names. It waits until dra serves the socket (it may just
// have been restarted).
func prepareClaims(b *testing.B, c kubernetes.Interface, sock, ns, node string, devices []string, paced bool, first, count int) (prep, unprep []time.Duration) {
	b.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	kubelet := drav1.NewDRAPluginClient(conn)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := kubelet.NodePrepareResources(ctx, &drav1.NodePrepareResourcesRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("dra does not serve %s: %v", sock, err)
		}
	}
	n := len(devices)
	for i := first; i < first+count; i++ {
		if paced {
			time.Sleep(pace)
		}
		claim := newAllocatedClaim(b, c, ns, node, fmt.Sprintf("c%d-%v-%d", n, paced, i), devices)
		ref := &drav1.Claim{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}
		t0 := time.Now()
		resp, err := kubelet.NodePrepareResources(context.Background(), &drav1.NodePrepareResourcesRequest{Claims: []*drav1.Claim{ref}})
		took := time.Since(t0)
		if err != nil {
			b.Fatalf("NodePrepareResources: %v", err)
		}
		if r := resp.GetClaims()[string(claim.UID)]; r.GetError() != "" || len(r.GetDevices()) != n {
			b.Fatalf("prepare of %s: %q, %d devices, want %d", claim.Name, r.GetError(), len(r.GetDevices()), n)
		}
		prep = append(prep, took)
		checkStatus(b, c, ns, claim.Name, n)
		t0 = time.Now()
		uresp, err := kubelet.NodeUnprepareResources(context.Background(), &drav1.NodeUnprepareResourcesRequest{Claims: []*drav1.Claim{ref}})
		took = time.Since(t0)
		if err != nil || uresp.GetClaims()[string(claim.UID)].GetError() != "" {
			b.Fatalf("NodeUnprepareResources: %v %v", err, uresp)
		}
		unprep = append(unprep, took)
		deleteClaim(c, ns, claim.Name)
	}
	return prep, unprep
}

// waitDevices waits until the node's slices of pool hold n devices and
// returns their names, sorted.
func waitDevices(b *testing.B, c kubernetes.Interface, node, pool string, n int) []string {
	b.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list, err := c.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			b.Fatal(err)
		}
		var names []string
		for _, s := range list.Items {
			if s.Spec.Driver == driver && s.Spec.Pool.Name == node+"/"+pool {
				for _, d := range s.Spec.Devices {
					names = append(names, d.Name)
				}
			}
		}
		if len(names) >= n {
			sort.Strings(names)
			return names
		}
		if time.Now().After(deadline) {
			b.Fatalf("pool %s has %d devices, want %d", pool, len(names), n)
		}
	}
}

// newAllocatedClaim creates a pod (held back by a scheduling gate) and a
// claim with one request a device, each with its own podIfName, and
// writes the allocation and the reservation for the pod as the scheduler
// would.
func newAllocatedClaim(b *testing.B, c kubernetes.Interface, ns, node, name string, devices []string) *resourceapi.ResourceClaim {
	b.Helper()
	ctx := context.Background()
	claimName := name
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		SchedulingGates: []corev1.PodSchedulingGate{{Name: "netdra.io/bench"}},
		ResourceClaims:  []corev1.PodResourceClaim{{Name: "net", ResourceClaimName: &claimName}},
		Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "net"}}}}},
	}}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName}}
	var results []resourceapi.DeviceRequestAllocationResult
	var configs []resourceapi.DeviceAllocationConfiguration
	for i, d := range devices {
		req := fmt.Sprintf("net%d", i+1)
		raw, _ := json.Marshal(map[string]any{"podIfName": req, "mtu": 1400})
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: req,
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdra-bench"}})
		opaque := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: raw}}}
		claim.Spec.Devices.Config = append(claim.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{Requests: []string{req}, DeviceConfiguration: opaque})
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: req, Driver: driver, Pool: node + "/net", Device: d}) // the slice pool: <node>/<pool>
		configs = append(configs, resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim,
			Requests: []string{req}, DeviceConfiguration: opaque})
	}
	claim, err = c.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: results, Config: configs},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		b.Fatalf("writing the allocation of %s: %v", claimName, err)
	}
	return claim
}

// checkStatus checks that dra wrote the claim's status: one entry per
// device, within 10 s of the prepare (dra writes it after the prepare
// returned). It is a correctness check of the run, not a timing
// assertion.
func checkStatus(b testing.TB, c kubernetes.Interface, ns, name string, n int) {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := c.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Status.Devices) == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("claim %s has %d device statuses 10 s after prepare, want %d", name, len(got.Status.Devices), n)
		}
	}
}

func deleteClaim(c kubernetes.Interface, ns, name string) {
	ctx := context.Background()
	_ = c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	_ = c.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
}
