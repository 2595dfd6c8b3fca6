package attachstatus

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/claims"
	"github.com/netdra/netdra/services/dra/publish/publishtest"
)

const node = "node-a"

func claimOf(name, uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "net", Driver: "netdra.io", Pool: "node-a/p", Device: d})
		c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: "netdra.io", Pool: "node-a/p", Device: d,
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "DevicePrepared"}}})
	}
	return c
}

func row(claim, device string, phase statev1.Phase, attachErr string, failures uint32) *statev1.Allocation {
	return &statev1.Allocation{Pool: "p", DeviceName: device, ClaimUid: "uid-" + claim, ClaimNamespace: "ns", ClaimName: claim,
		Phase: phase, AttachError: attachErr, AttachFailures: failures}
}

type rig struct {
	t      *testing.T
	client *fake.Clientset
	events *record.FakeRecorder
	src    *publishtest.Views
}

func start(t *testing.T, objs ...*resourceapi.ResourceClaim) *rig {
	t.Helper()
	c := fake.NewClientset()
	for _, o := range objs {
		if _, err := c.ResourceV1().ResourceClaims(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := &rig{t: t, client: c, events: record.NewFakeRecorder(100), src: publishtest.New()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	rep := New(slog.New(slog.NewTextHandler(io.Discard, nil)), r.src, claims.NewClaims(c, r.events), node, 50*time.Millisecond)
	go func() {
		defer close(done)
		_ = rep.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// attached returns the claim's Attached condition of device, waiting up
// to a few seconds for want to hold; with want nil, as it is now.
func (r *rig) attached(claim, device string, want func(*metav1.Condition) bool) *metav1.Condition {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var cond *metav1.Condition
		c, err := r.client.ResourceV1().ResourceClaims("ns").Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil {
			r.t.Fatal(err)
		}
		for _, e := range c.Status.Devices {
			if e.Device == device {
				for i := range e.Conditions {
					if e.Conditions[i].Type == ConditionAttached {
						cond = &e.Conditions[i]
					}
				}
			}
		}
		if want == nil || want(cond) || time.Now().After(deadline) {
			return cond
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drain returns the events recorded so far.
func (r *rig) drain() []string {
	var out []string
	for {
		select {
		case e := <-r.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func isFalse(msg string) func(*metav1.Condition) bool {
	return func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonAttachFailed && c.Message == msg
	}
}

func isTrue(c *metav1.Condition) bool {
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonAttached
}

// TestReporter: a failed attach puts Attached False with the error on the
// device's entry and one Warning event; the kubelet's retries failing the
// same way add nothing; a new cause is a new event; the attach that
// succeeds turns the condition True, without an event.
func TestReporter(t *testing.T) {
	r := start(t, claimOf("c1", "c1", "dh0"))
	const vrf = "vrf: this node's kernel has no VRF devices (CONFIG_NET_VRF): operation not supported"
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, vrf, 1))
	if c := r.attached("c1", "dh0", isFalse(vrf)); !isFalse(vrf)(c) {
		t.Fatalf("Attached = %+v, want False AttachFailed with the error", c)
	}
	time.Sleep(100 * time.Millisecond)
	if ev := r.drain(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning AttachFailed device dh0 ") || !strings.HasSuffix(ev[0], vrf) {
		t.Fatalf("events %q, want one Warning AttachFailed naming the device and the error", ev)
	}

	for n := uint32(2); n <= 4; n++ {
		r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, vrf, n))
	}
	time.Sleep(200 * time.Millisecond)
	if ev := r.drain(); len(ev) != 0 {
		t.Errorf("the same cause again made events %q", ev)
	}

	const route = "routes[0]: the kernel refused the route: network is unreachable"
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, route, 1))
	if c := r.attached("c1", "dh0", isFalse(route)); !isFalse(route)(c) {
		t.Fatalf("Attached = %+v, want the new cause", c)
	}
	time.Sleep(100 * time.Millisecond)
	if ev := r.drain(); len(ev) != 1 || !strings.HasSuffix(ev[0], route) {
		t.Errorf("events %q, want one for the new cause", ev)
	}

	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_ATTACHED, "", 0))
	if c := r.attached("c1", "dh0", isTrue); !isTrue(c) {
		t.Fatalf("Attached = %+v, want True", c)
	}
	time.Sleep(100 * time.Millisecond)
	if ev := r.drain(); len(ev) != 0 {
		t.Errorf("a successful attach made events %q", ev)
	}
}

// TestReporter_Restart: a restarted dra finds the cause on the claim
// already: no second event; a row never attached gets no condition.
func TestReporter_Restart(t *testing.T) {
	const vrf = "vrf: refused"
	c := claimOf("c1", "c1", "dh0", "dh1")
	c.Status.Devices[0].Conditions = append(c.Status.Devices[0].Conditions, Condition(false, vrf))
	c.Status.Devices[0].Conditions[1].LastTransitionTime = metav1.Now()
	r := start(t, c)
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, vrf, 7), row("c1", "dh1", statev1.Phase_PHASE_PREPARED, "", 0))
	time.Sleep(200 * time.Millisecond)
	if ev := r.drain(); len(ev) != 0 {
		t.Errorf("events %q, want none: the cause is on the claim already", ev)
	}
	if cond := r.attached("c1", "dh1", nil); cond != nil {
		t.Errorf("dh1, never attached, has %+v", cond)
	}
}

// TestReporter_Retries: a write the API server refuses is tried again
// until it is taken; a claim that is gone is not asked for again.
func TestReporter_Retries(t *testing.T) {
	r := start(t, claimOf("c1", "c1", "dh0"))
	var mu sync.Mutex
	refusals, goneGets := 2, 0
	r.client.PrependReactor("update", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if refusals > 0 {
			refusals--
			return true, nil, apierrors.NewInternalError(errors.New("etcd is away"))
		}
		return false, nil, nil
	})
	r.client.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "gone" {
			mu.Lock()
			goneGets++
			mu.Unlock()
		}
		return false, nil, nil
	})
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_ATTACHED, "", 0), row("gone", "dh1", statev1.Phase_PHASE_ATTACHED, "", 0))
	if c := r.attached("c1", "dh0", isTrue); !isTrue(c) {
		t.Fatalf("Attached = %+v after two refused writes, want True", c)
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if refusals != 0 || goneGets != 1 {
		t.Errorf("refusals left %d, reads of the gone claim %d; want 0 and 1", refusals, goneGets)
	}
}

func isDetached(c *metav1.Condition) bool {
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonDetached && c.Message == MsgDetached
}

// TestReporter_Detached: a device that leaves its pod while the claim
// stays prepared (the row back to PREPARED) turns Attached False with
// reason Detached, without an event, and True again at the next attach.
func TestReporter_Detached(t *testing.T) {
	r := start(t, claimOf("c1", "c1", "dh0"))
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_ATTACHED, "", 0))
	if c := r.attached("c1", "dh0", isTrue); !isTrue(c) {
		t.Fatalf("Attached = %+v, want True", c)
	}
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, "", 0))
	if c := r.attached("c1", "dh0", isDetached); !isDetached(c) {
		t.Fatalf("Attached after the detach = %+v, want False Detached", c)
	}
	if ev := r.drain(); len(ev) != 0 {
		t.Errorf("a detach made events %q", ev)
	}
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_ATTACHED, "", 0))
	if c := r.attached("c1", "dh0", isTrue); !isTrue(c) {
		t.Fatalf("Attached after the next attach = %+v, want True", c)
	}
}

// TestReporter_DetachedWhileAway: a restarted dra finds a prepared row in
// no pod whose claim still says Attached True (the detach came while dra
// was away) and turns it Detached; a row never attached gets no
// condition, and a row prepared after the start is not read at all.
func TestReporter_DetachedWhileAway(t *testing.T) {
	c := claimOf("c1", "c1", "dh0", "dh1")
	c.Status.Devices[0].Conditions = append(c.Status.Devices[0].Conditions, Condition(true, ""))
	c.Status.Devices[0].Conditions[1].LastTransitionTime = metav1.Now()
	r := start(t, c, claimOf("c2", "c2", "dh2"))
	var mu sync.Mutex
	c2Gets := 0
	r.client.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "c2" {
			mu.Lock()
			c2Gets++
			mu.Unlock()
		}
		return false, nil, nil
	})
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, "", 0), row("c1", "dh1", statev1.Phase_PHASE_PREPARED, "", 0))
	if cond := r.attached("c1", "dh0", isDetached); !isDetached(cond) {
		t.Fatalf("dh0's Attached = %+v, want False Detached", cond)
	}
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_PREPARED, "", 0), row("c1", "dh1", statev1.Phase_PHASE_PREPARED, "", 0),
		row("c2", "dh2", statev1.Phase_PHASE_PREPARED, "", 0))
	time.Sleep(200 * time.Millisecond)
	if cond := r.attached("c1", "dh1", nil); cond != nil {
		t.Errorf("dh1, never attached, has %+v", cond)
	}
	mu.Lock()
	defer mu.Unlock()
	if c2Gets != 0 {
		t.Errorf("a claim prepared after the start was read %d times, want 0", c2Gets)
	}
}

// TestReporter_EntryLater: an attach recorded before dra's status write
// after the prepare landed (the claim has no entry for the device yet) is
// reported once the entry is there.
func TestReporter_EntryLater(t *testing.T) {
	claim := claimOf("c1", "c1")
	r := start(t, claim)
	r.src.Set(row("c1", "dh0", statev1.Phase_PHASE_ATTACHED, "", 0))
	time.Sleep(100 * time.Millisecond)
	withEntry := claimOf("c1", "c1", "dh0")
	cur, err := r.client.ResourceV1().ResourceClaims("ns").Get(context.Background(), "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status = withEntry.Status
	if _, err := r.client.ResourceV1().ResourceClaims("ns").UpdateStatus(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := r.attached("c1", "dh0", isTrue); !isTrue(c) {
		t.Fatalf("Attached = %+v once the entry was written, want True", c)
	}
}
