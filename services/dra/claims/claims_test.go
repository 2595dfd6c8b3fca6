package claims

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
