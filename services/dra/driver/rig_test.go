package driver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
)

const (
	testDriver = "netdra.io"
	testPool   = "pool-a"
	// testSlicePool is testPool's name at the API: in results, status entries, the kubelet's.
	testSlicePool = testNode + "/" + testPool
	testNode      = "node-a"
)

var testNow = time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)

func vf(name, ifName string, index int32) *devicev1.Device {
	return &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, KernelIfName: ifName,
		PfName: "ens1f0", VfIndex: &index, MacAddress: fmt.Sprintf("02:00:00:00:00:%02x", index)}
}

// inventory: three VFs and a dummy.
func testInventory() []*devicev1.Device {
	return []*devicev1.Device{
		vf("vf1", "ens1f0v1", 1), vf("vf2", "ens1f0v2", 2), vf("vf3", "ens1f0v3", 3),
		{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "dummy0"},
	}
}

func deviceByName(name string) *devicev1.Device {
	for _, d := range testInventory() {
		if d.GetName() == name {
			return d
		}
	}
	return nil
}

type rig struct {
	rec    *recorder
	state  *fakeState
	mem    *memState
	prov   *fakeProvisioner
	claims *fakeClaims
	pods   map[string]*corev1.Pod
	d      *Driver
	// freed collects what a test's FreeFunc wants to look at.
	freed []*devicev1.PreparedDevice
}

func newRig(t *testing.T, rows ...*statev1.Allocation) *rig {
	t.Helper()
	r := &rig{rec: &recorder{}, pods: map[string]*corev1.Pod{}}
	r.state, r.mem = newMemState(r.rec, testInventory(), rows...)
	r.prov = newFakeProvisioner(r.rec, r.mem.inventory)
	r.claims = newFakeClaims(r.rec)
	d, err := New(Config{
		DriverName: testDriver, NodeName: testNode,
		State: r.state, Provisioner: r.prov, Claims: r.claims,
		PodLookup: func(_ context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error) {
			if p, ok := r.pods[name]; ok {
				return p, nil
			}
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid}}, nil
		},
		Pools:     []publish.Spec{{Name: testPool}},
		Logger:    testLogger(t),
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.now = func() time.Time { return testNow }
	r.d = d
	return r
}

// prepare prepares one claim and returns its result.
func (r *rig) prepare(t *testing.T, claim *resourceapi.ResourceClaim) ([]deviceResult, error) {
	t.Helper()
	res, err := r.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("PrepareResourceClaims: %v", err)
	}
	// The claim status is written after the prepare returned.
	r.d.statusWrites.Wait()
	got, ok := res[claim.UID]
	if !ok || len(res) != 1 {
		t.Fatalf("PrepareResourceClaims returned %v, want one result for %s", res, claim.UID)
	}
	var out []deviceResult
	for _, d := range got.Devices {
		out = append(out, deviceResult{Requests: fmt.Sprint(d.Requests), Pool: d.PoolName, Device: d.DeviceName})
	}
	return out, got.Err
}

type deviceResult struct{ Requests, Pool, Device string }

// claimSpec describes a test claim.
type claimSpec struct {
	name    string
	pods    []string // reservedFor
	results []resourceapi.DeviceRequestAllocationResult
	configs []resourceapi.DeviceAllocationConfiguration
	status  []resourceapi.AllocatedDeviceStatus
}

func (c claimSpec) build() *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: c.name, UID: types.UID("uid-" + c.name), Generation: 1},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: c.results, Config: c.configs}},
			Devices:    c.status,
		},
	}
	for _, p := range c.pods {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	return claim
}

func result(request, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: testDriver, Pool: testSlicePool, Device: device}
}

func otherResult(request, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "gpu.example.com", Pool: "gpus", Device: device}
}

func opaque(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	}
}

func claimConfig(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return opaque(resourceapi.AllocationConfigSourceClaim, testDriver, params, requests...)
}

// row is an allocation in the state.
func row(claim, pod, device string, phase statev1.Phase, cfg *devicev1.DeviceConfig) *statev1.Allocation {
	a := &statev1.Allocation{
		Pool: testPool, DeviceName: device, Manager: deviceByName(device).GetManager(),
		ClaimUid: "uid-" + claim, ClaimNamespace: "default", ClaimName: claim, Request: "net",
		PodUid: "uid-" + pod, Config: cfg, Phase: phase,
	}
	if phase != statev1.Phase_PHASE_PREPARING {
		a.PreparedDevice = preparedOf(deviceByName(device))
	}
	return a
}

// rowSummary is the state's rows, one line each.
func rowSummary(rows []*statev1.Allocation) []string {
	out := []string{}
	for _, r := range rows {
		pd := "-"
		if r.GetPreparedDevice() != nil {
			pd = "pd"
		}
		out = append(out, fmt.Sprintf("%s/%s %s %s pod=%s if=%s %s", r.GetPool(), r.GetDeviceName(), r.GetPhase(),
			r.GetClaimUid(), r.GetPodUid(), r.GetConfig().GetPodIfName(), pd))
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func podOf(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
}

func protojsonUnmarshal(b []byte, m proto.Message) error { return protojson.Unmarshal(b, m) }
