package claims

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func entry(device, reason string) resourceapi.AllocatedDeviceStatus {
	return resourceapi.AllocatedDeviceStatus{Driver: "netdra.io", Pool: "node-a-p", Device: device,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason}}}
}

// withResourceVersions makes the fake clientset's claim updates behave
// as the API server's: a stale resourceVersion or another UID is a
// conflict, and each write gives the claim a new resourceVersion.
func withResourceVersions(c *fake.Clientset) *fake.Clientset {
	rv := 100
	c.PrependReactor("update", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		next := a.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim).DeepCopy()
		gvr := a.GetResource()
		obj, err := c.Tracker().Get(gvr, next.Namespace, next.Name)
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*resourceapi.ResourceClaim)
		if cur.ResourceVersion != next.ResourceVersion || cur.UID != next.UID {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), next.Name, fmt.Errorf("stale: %s/%s, now %s/%s", next.UID, next.ResourceVersion, cur.UID, cur.ResourceVersion))
		}
		rv++
		next.ResourceVersion = strconv.Itoa(rv)
		return true, next, c.Tracker().Update(gvr, next, next.Namespace)
	})
	return c
}

func verbs(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		out = append(out, a.GetVerb()+"/"+a.GetSubresource())
	}
	return out
}

// The claim in hand (read by the kubelet plugin moments before) is
// updated without reading it again: one round trip on the pod's path.
func TestUpdateDeviceStatus_OneRoundTripFromTheClaimInHand(t *testing.T) {
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u1", ResourceVersion: "1"}}
	claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{entry("other", "Theirs"), entry("vf1", "Old")}
	c := withResourceVersions(fake.NewClientset(claim))
	inHand, err := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	if err := NewClaims(c, nil).UpdateDeviceStatus(ctx, inHand, []resourceapi.AllocatedDeviceStatus{entry("vf1", "New")}); err != nil {
		t.Fatal(err)
	}
	if got := verbs(c); len(got) != 1 || got[0] != "update/status" {
		t.Fatalf("calls %v, want one update/status", got)
	}
	got, _ := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if len(got.Status.Devices) != 2 || got.Status.Devices[0].Device != "other" || got.Status.Devices[1].Conditions[0].Reason != "New" {
		t.Fatalf("status %+v: want the other driver's entry kept and vf1's replaced", got.Status.Devices)
	}
	if len(inHand.Status.Devices) != 2 || inHand.Status.Devices[1].Conditions[0].Reason != "Old" {
		t.Fatalf("the claim in hand was changed: %+v", inHand.Status.Devices)
	}
}

// A claim that changed since it was read is read afresh and updated,
// keeping the entries written meanwhile; a replaced claim is refused.
func TestUpdateDeviceStatus_ConflictReadsAfresh(t *testing.T) {
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u1", ResourceVersion: "1"}}
	c := withResourceVersions(fake.NewClientset(claim))
	stale, _ := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	// Someone else writes their entry meanwhile.
	other := stale.DeepCopy()
	other.Status.Devices = []resourceapi.AllocatedDeviceStatus{entry("other", "Theirs")}
	if _, err := c.ResourceV1().ResourceClaims("ns").UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	if err := NewClaims(c, nil).UpdateDeviceStatus(ctx, stale, []resourceapi.AllocatedDeviceStatus{entry("vf1", "New")}); err != nil {
		t.Fatal(err)
	}
	if got := verbs(c); len(got) != 3 || got[0] != "update/status" || got[1] != "get/" || got[2] != "update/status" {
		t.Fatalf("calls %v, want update/status (conflict), get, update/status", got)
	}
	got, _ := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if len(got.Status.Devices) != 2 {
		t.Fatalf("status %+v: want the entry written meanwhile and vf1's", got.Status.Devices)
	}

	replaced := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u0", ResourceVersion: "1"}}
	if err := NewClaims(c, nil).UpdateDeviceStatus(ctx, replaced, nil); err == nil {
		t.Fatal("a replaced claim's status was written")
	}
}

// allocatedClaim is a claim allocated vf1 and vf2 of netdra.io's pool
// node-a-p, with a Ready entry for each and another driver's entry for a
// device of the same name.
func allocatedClaim() *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "u1", ResourceVersion: "1", Generation: 3}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "net", Driver: "netdra.io", Pool: "node-a-p", Device: "vf1"},
		{Request: "net2", Driver: "netdra.io", Pool: "node-a-p", Device: "vf2"},
	}}}
	theirs := entry("vf1", "Theirs")
	theirs.Driver = "other.example.com"
	claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{theirs, entry("vf1", "DevicePrepared"), entry("vf2", "DevicePrepared")}
	return claim
}

// SetDeviceCondition puts the condition on the device's entry of the
// driver its allocation result names, beside its other conditions, and
// writes only a change.
func TestSetDeviceCondition(t *testing.T) {
	ctx := context.Background()
	c := withResourceVersions(fake.NewClientset(allocatedClaim()))
	cl := NewClaims(c, nil)
	dev := DeviceRef{Pool: "node-a-p", Device: "vf1"}
	failed := metav1.Condition{Type: "Attached", Status: metav1.ConditionFalse, Reason: "AttachFailed", Message: "vrf: no VRF devices"}
	changed, written, err := cl.SetDeviceCondition(ctx, "ns", "c", "u1", dev, failed)
	if err != nil || !changed {
		t.Fatalf("SetDeviceCondition = %v, %v; want a change written", changed, err)
	}
	got, _ := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if written.ResourceVersion != got.ResourceVersion {
		t.Errorf("returned claim at %s, stored at %s", written.ResourceVersion, got.ResourceVersion)
	}
	e := got.Status.Devices[1]
	if len(e.Conditions) != 2 || e.Conditions[0].Type != "Ready" || e.Conditions[1].Type != "Attached" ||
		e.Conditions[1].Message != failed.Message || e.Conditions[1].ObservedGeneration != 3 || e.Conditions[1].LastTransitionTime.IsZero() {
		t.Fatalf("vf1's conditions %+v: want Ready kept and Attached added with the generation and a transition time", e.Conditions)
	}
	if len(got.Status.Devices[0].Conditions) != 1 || len(got.Status.Devices[2].Conditions) != 1 {
		t.Errorf("other entries changed: %+v", got.Status.Devices)
	}

	c.ClearActions()
	if changed, _, err := cl.SetDeviceCondition(ctx, "ns", "c", "u1", dev, failed); err != nil || changed {
		t.Errorf("the same condition again = %v, %v; want no change", changed, err)
	}
	if v := verbs(c); len(v) != 1 || v[0] != "get/" {
		t.Errorf("the same condition again made calls %v, want one get", v)
	}

	ok := metav1.Condition{Type: "Attached", Status: metav1.ConditionTrue, Reason: "Attached", Message: "in the pod's network namespace"}
	if changed, _, err := cl.SetDeviceCondition(ctx, "ns", "c", "u1", dev, ok); err != nil || !changed {
		t.Fatalf("Attached True = %v, %v; want a change", changed, err)
	}
	got, _ = c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if cs := got.Status.Devices[1].Conditions; len(cs) != 2 || cs[1].Status != metav1.ConditionTrue || cs[1].Reason != "Attached" {
		t.Errorf("vf1's conditions %+v, want Attached True", cs)
	}
}

// ReplaceDeviceCondition writes only over a condition of the status it
// names: not on an entry without the condition, not over another status.
func TestReplaceDeviceCondition(t *testing.T) {
	ctx := context.Background()
	c := withResourceVersions(fake.NewClientset(allocatedClaim()))
	cl := NewClaims(c, nil)
	dev := DeviceRef{Pool: "node-a-p", Device: "vf1"}
	detached := metav1.Condition{Type: "Attached", Status: metav1.ConditionFalse, Reason: "Detached", Message: "out of the pod"}
	if changed, _, err := cl.ReplaceDeviceCondition(ctx, "ns", "c", "u1", dev, metav1.ConditionTrue, detached); err != nil || changed {
		t.Fatalf("over no Attached condition = %v, %v; want no change", changed, err)
	}
	ok := metav1.Condition{Type: "Attached", Status: metav1.ConditionTrue, Reason: "Attached", Message: "in the pod's network namespace"}
	if _, _, err := cl.SetDeviceCondition(ctx, "ns", "c", "u1", dev, ok); err != nil {
		t.Fatal(err)
	}
	if changed, _, err := cl.ReplaceDeviceCondition(ctx, "ns", "c", "u1", dev, metav1.ConditionTrue, detached); err != nil || !changed {
		t.Fatalf("over Attached True = %v, %v; want a change", changed, err)
	}
	got, _ := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if cs := got.Status.Devices[1].Conditions; len(cs) != 2 || cs[1].Status != metav1.ConditionFalse || cs[1].Reason != "Detached" {
		t.Errorf("vf1's conditions %+v, want Attached False Detached", cs)
	}
	failed := metav1.Condition{Type: "Attached", Status: metav1.ConditionFalse, Reason: "AttachFailed", Message: "vrf"}
	if changed, _, err := cl.ReplaceDeviceCondition(ctx, "ns", "c", "u1", dev, metav1.ConditionTrue, failed); err != nil || changed {
		t.Errorf("over Attached False = %v, %v; want no change", changed, err)
	}
}

// Nothing to set the condition on: the claim is gone or replaced, or has
// no entry (or allocation result) for the device.
func TestSetDeviceCondition_Nothing(t *testing.T) {
	ctx := context.Background()
	noEntry := allocatedClaim()
	noEntry.Status.Devices = noEntry.Status.Devices[:2]
	c := withResourceVersions(fake.NewClientset(noEntry))
	cl := NewClaims(c, nil)
	cond := metav1.Condition{Type: "Attached", Status: metav1.ConditionTrue, Reason: "Attached"}
	for _, tc := range []struct {
		name, claim string
		uid         types.UID
		dev         DeviceRef
		want        error
	}{
		{"gone", "nope", "u1", DeviceRef{Pool: "node-a-p", Device: "vf1"}, ErrClaimGone},
		{"replaced", "c", "u0", DeviceRef{Pool: "node-a-p", Device: "vf1"}, ErrClaimGone},
		{"no entry", "c", "u1", DeviceRef{Pool: "node-a-p", Device: "vf2"}, ErrNoEntry},
		{"not allocated", "c", "u1", DeviceRef{Pool: "node-a-p", Device: "vf3"}, ErrNoEntry},
	} {
		if _, _, err := cl.SetDeviceCondition(ctx, "ns", tc.claim, tc.uid, tc.dev, cond); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// A claim written meanwhile (a conflict) is read afresh and its new
// content kept.
func TestSetDeviceCondition_Conflict(t *testing.T) {
	ctx := context.Background()
	c := withResourceVersions(fake.NewClientset(allocatedClaim()))
	first := true
	c.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !first {
			return false, nil, nil
		}
		first = false
		// Another writer changes the claim right after this read.
		obj, _ := c.Tracker().Get(a.GetResource(), "ns", "c")
		stale := obj.(*resourceapi.ResourceClaim).DeepCopy()
		next := stale.DeepCopy()
		next.Status.Devices[2].Conditions[0].Reason = "Rewritten"
		next.ResourceVersion = "50"
		if err := c.Tracker().Update(a.GetResource(), next, "ns"); err != nil {
			return true, nil, err
		}
		return true, stale, nil
	})
	cond := metav1.Condition{Type: "Attached", Status: metav1.ConditionFalse, Reason: "AttachFailed", Message: "boom"}
	if changed, _, err := NewClaims(c, nil).SetDeviceCondition(ctx, "ns", "c", "u1", DeviceRef{Pool: "node-a-p", Device: "vf1"}, cond); err != nil || !changed {
		t.Fatalf("SetDeviceCondition = %v, %v", changed, err)
	}
	got, _ := c.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if got.Status.Devices[2].Conditions[0].Reason != "Rewritten" || len(got.Status.Devices[1].Conditions) != 2 {
		t.Errorf("status %+v: want the other writer's change kept and the condition set", got.Status.Devices)
	}
}
