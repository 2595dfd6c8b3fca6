package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/process"
)

func status(t *testing.T, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBuildNode: the inventory, allocations and slices joined: a free
// tainted device, an attached one with its claim and pod, a lost one (a
// prepared allocation whose device is gone), an attached one the host no
// longer sees (in its pod: not lost); a process that could not be read is
// a problem.
func TestBuildNode(t *testing.T) {
	dump := &statev1.DumpResponse{
		Devices: []*devicev1.Device{
			{Name: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "eth1", LinkState: devicev1.LinkState_LINK_STATE_DOWN},
			{Name: "eth2", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "eth2", LinkState: devicev1.LinkState_LINK_STATE_UP},
		},
		Allocations: []*statev1.Allocation{
			{Pool: "net", DeviceName: "eth2", ClaimUid: "c1", ClaimNamespace: "ns", ClaimName: "a", PodUid: "p1",
				Phase: statev1.Phase_PHASE_ATTACHED, NetnsPath: "/var/run/netns/x", PoolAddresses: []string{"10.0.0.2/24"}},
			{Pool: "net", DeviceName: "gone0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, ClaimUid: "c2", ClaimNamespace: "ns", ClaimName: "b",
				Phase: statev1.Phase_PHASE_PREPARED},
			{Pool: "net", DeviceName: "moved0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, ClaimUid: "c3", ClaimNamespace: "ns", ClaimName: "c",
				Phase: statev1.Phase_PHASE_ATTACHED, PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "moved0", KernelIfName: "moved0"}}},
		},
		IpPools: []*statev1.IPPoolStatus{{Pool: &statev1.IPPool{Name: "v4", Subnet: "10.0.0.0/24"}, Size: "253", Used: 1, Free: "252"}},
	}
	in := NodeInput{
		Name: "n1", Pod: "netdra-system/netdra-node-x", Driver: "netdra.io",
		Reports: map[string]process.Report{
			"state": {Process: "state", Version: "v1", Healthy: true, Status: status(t, dump)},
			"dra": {Process: "dra", Version: "v1", Healthy: true, Status: status(t, &drav1.StatusResponse{DriverName: "netdra.io", Registered: true,
				Pools: []*drav1.PoolStatus{{Name: "net", Devices: 2}}})},
			"nri": {Process: "nri", Version: "v1", HealthError: "health check: refused"},
		},
		ReadErrors: map[string]error{"provisioner": errString("exec: no container")},
		Containers: map[string]Container{"state": {Image: "img/state:v1", Ready: true, Restarts: 2}},
		Slices: []resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{Pool: resourceapi.ResourcePool{Name: "n1-net"},
			Devices: []resourceapi.Device{{Name: "eth1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"pool": {StringValue: ptr("net")}}, Taints: []resourceapi.DeviceTaint{{Key: "netdra.io/unhealthy", Value: "link-down",
				Effect: resourceapi.DeviceTaintEffectNoSchedule}}}, {Name: "eth2"}}}}},
		Pods: map[string]string{"p1": "ns/pod-a"},
	}
	n := BuildNode(in)
	want := []Device{
		{Name: "eth2", Pool: "n1-net", Manager: "host", Interface: "eth2", Link: "up", Published: true, State: StateAttached,
			Holders: []Holder{{ClaimNamespace: "ns", ClaimName: "a", ClaimUID: "c1", Pod: "ns/pod-a", PodUID: "p1", Phase: StateAttached,
				Attached: true, Netns: "/var/run/netns/x", Addresses: []string{"10.0.0.2/24"}}}},
		{Name: "eth1", Pool: "net", Manager: "host", Interface: "eth1", Link: "down", Published: true,
			Taints: []string{"netdra.io/unhealthy=link-down:NoSchedule"}, State: StateFree},
		{Name: "gone0", Pool: "net", Manager: "dummy", State: StateLost,
			Holders: []Holder{{ClaimNamespace: "ns", ClaimName: "b", ClaimUID: "c2", Phase: StatePrepared}}},
		{Name: "moved0", Pool: "net", Manager: "host", Interface: "moved0", State: StateAttached,
			Holders: []Holder{{ClaimNamespace: "ns", ClaimName: "c", ClaimUID: "c3", Phase: StateAttached, Attached: true}}},
	}
	if diff := cmp.Diff(want, n.Devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]IPPool{{Name: "v4", Subnet: "10.0.0.0/24", Size: "253", Used: 1, Free: "252"}}, n.IPPools); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	byName := map[string]Process{}
	for _, p := range n.Processes {
		byName[p.Name] = p
	}
	if p := byName["state"]; !p.Healthy || p.Image != "img/state:v1" || p.Restarts != 2 || p.Detail != "2 devices, 3 allocations, 1 address pools" {
		t.Errorf("state: %+v", p)
	}
	if p := byName["dra"]; !strings.Contains(p.Detail, "registered as netdra.io") || !strings.Contains(p.Detail, "1 pools, 2 devices published") {
		t.Errorf("dra: %+v", p)
	}
	if p := byName["nri"]; p.Healthy || p.Error != "health check: refused" {
		t.Errorf("nri: %+v", p)
	}
	if len(n.Problems) != 1 || !strings.Contains(n.Problems[0], "provisioner: exec: no container") {
		t.Errorf("problems %q", n.Problems)
	}
	var out bytes.Buffer
	if err := NodeTable(&out, n); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"eth2 n1-net host eth2 up yes - attached ns/a ns/pod-a yes 10.0.0.2/24",
		"gone0 net dummy - - no - lost ns/b - no -",
		"eth1 net host eth1 down yes netdra.io/unhealthy=link-down:NoSchedule free - - - -",
		"v4 10.0.0.0/24 253 1 252 no",
	} {
		if !hasRow(out.String(), line) {
			t.Errorf("the table lacks the row %q:\n%s", line, out.String())
		}
	}
	if got := AllocatedClaims(in.Reports["state"]); !cmp.Equal(got, [][2]string{{"ns", "a"}, {"ns", "b"}, {"ns", "c"}}) {
		t.Errorf("AllocatedClaims = %v", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestBuildNodes_Low(t *testing.T) {
	nc := func(name string, pools ...v1alpha1.IPPoolUsage) v1alpha1.NodeConfig {
		n := v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.IPPools = pools
		n.Status.Conditions = []metav1.Condition{{Type: "Applied", Status: metav1.ConditionTrue}}
		return n
	}
	ns := BuildNodes([]v1alpha1.NodeConfig{
		nc("a", v1alpha1.IPPoolUsage{Name: "p", Size: "100", Used: 50, Free: "50"}),
		nc("b", v1alpha1.IPPoolUsage{Name: "p", Size: "100", Used: 95, Free: "5"}),                                     // 5%: low
		nc("c", v1alpha1.IPPoolUsage{Name: "p", Size: "20", Used: 17, Free: "3"}),                                      // under 5 free: low
		nc("d", v1alpha1.IPPoolUsage{Name: "v6", Size: "18446744073709551616", Used: 1, Free: "18446744073709551615"}), // beyond 64 bits
		nc("e", v1alpha1.IPPoolUsage{Name: "p", Size: "x", Free: "y"}),                                                 // unreadable: not judged
	}, Low{MinFree: 5, MinFreePercent: 10})
	var got []string
	for _, n := range ns {
		got = append(got, n.Node+map[bool]string{true: " low", false: ""}[n.Low])
	}
	if diff := cmp.Diff([]string{"b low", "c low", "a", "d", "e"}, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := NodesTable(&out, ns); err != nil || !hasRow(out.String(), "b - True p 100 95 5 yes") {
		t.Errorf("table (%v):\n%s", err, out.String())
	}
}

// TestBuildClaims: a claim whose pod could not prepare it is failed with
// the kubelet's event; one whose pod became ready after an old warning is
// ok; an unallocated one of a netdra class is pending; another driver's
// claim is not shown.
func TestBuildClaims(t *testing.T) {
	now := time.Now()
	alloc := func(driver string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: driver, Pool: "n1-net", Device: "eth1"}}}}
	}
	claim := func(name string, a *resourceapi.AllocationResult, pod types.UID) resourceapi.ResourceClaim {
		rc := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
		rc.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "net.netdra.io"}}}
		rc.Status.Allocation = a
		if pod != "" {
			rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: string(pod), UID: pod}}
		}
		return rc
	}
	pod := func(name string, ready bool, since time.Time) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}
		return p
	}
	event := func(kind, name, reason, msg string, at time.Time) corev1.Event {
		return corev1.Event{Type: corev1.EventTypeWarning, Reason: reason, Message: msg, Count: 3, LastTimestamp: metav1.NewTime(at),
			InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: "ns", Name: name}}
	}
	other := claim("gpu", alloc("gpu.example.com"), "")
	other.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gpu"
	cs := BuildClaims(ClaimsInput{
		Drivers: map[string]bool{"netdra.io": true}, Classes: map[string]bool{"net.netdra.io": true},
		Claims: []resourceapi.ResourceClaim{claim("bad", alloc("netdra.io"), "pod-bad"), claim("fine", alloc("netdra.io"), "pod-fine"), claim("waiting", nil, ""), other},
		Pods:   []corev1.Pod{pod("pod-bad", false, now.Add(-time.Minute)), pod("pod-fine", true, now.Add(-time.Minute))},
		Events: []corev1.Event{
			event("Pod", "pod-bad", "FailedPrepareDynamicResources", "prepare: podIfName\n net1 in use", now),
			event("Pod", "pod-fine", "FailedCreatePodSandBox", "attach refused", now.Add(-time.Hour)),
			event("Pod", "pod-bad", "BackOff", "unrelated", now),
		},
	})
	var got []string
	for _, c := range cs {
		s := c.Name + " " + c.State
		for _, r := range c.Reasons {
			s += " [" + r.Source + " " + r.Reason + "]"
		}
		got = append(got, s)
	}
	want := []string{"bad failed [pod pod-bad FailedPrepareDynamicResources]", "waiting pending", "fine ok [pod pod-fine FailedCreatePodSandBox]"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := ClaimsTable(&out, cs[:1]); err != nil || !strings.Contains(out.String(), "(x3) prepare: podIfName net1 in use") {
		t.Errorf("table (%v):\n%s", err, out.String())
	}
}

func ptr[T any](v T) *T { return &v }

// hasRow says the table has a row of these cells (whitespace apart).
func hasRow(table, cells string) bool {
	for line := range strings.Lines(table) {
		if strings.Join(strings.Fields(line), " ") == cells {
			return true
		}
	}
	return false
}
