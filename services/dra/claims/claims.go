// Package claims is dra's side of the ResourceClaims: writing their device
// status and events, finding the claims of the node's pods at recovery, and
// reading which driver a claim's allocated device belongs to (the driver
// rename protocol asks).
package claims

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/netdra/netdra/services/dra/driver"
	"github.com/netdra/netdra/services/dra/slicepool"
)

// Claims writes claim status and events.
type Claims struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
}

var _ driver.ClaimWriter = (*Claims)(nil)

// NewClaims returns the claim writer.
func NewClaims(client kubernetes.Interface, recorder record.EventRecorder) *Claims {
	return &Claims{client: client, recorder: recorder}
}

func sameEntry(a, b resourceapi.AllocatedDeviceStatus) bool {
	return a.Driver == b.Driver && a.Pool == b.Pool && a.Device == b.Device && ptrEq(a.ShareID, b.ShareID)
}

func ptrEq[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// UpdateDeviceStatus implements driver.ClaimWriter: it replaces these
// devices' entries and keeps every other. The first try starts from the
// claim in hand, which the kubelet plugin read moments before the
// prepare: one API round trip, on every pod's path. A conflict (the claim
// changed since) retries from a fresh copy.
func (c *Claims) UpdateDeviceStatus(ctx context.Context, claim *resourceapi.ResourceClaim, devices []resourceapi.AllocatedDeviceStatus) error {
	claims := c.client.ResourceV1().ResourceClaims(claim.Namespace)
	cur := claim
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			fresh, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		if cur.UID != claim.UID {
			return fmt.Errorf("claim %s/%s was replaced", claim.Namespace, claim.Name)
		}
		_, err := claims.UpdateStatus(ctx, withDeviceStatus(cur, devices), metav1.UpdateOptions{})
		cur = nil // a retry reads the claim afresh
		return err
	})
}

// withDeviceStatus is a copy of claim whose status has devices' entries
// in place of the ones it had for the same devices.
func withDeviceStatus(claim *resourceapi.ResourceClaim, devices []resourceapi.AllocatedDeviceStatus) *resourceapi.ResourceClaim {
	next := claim.DeepCopy()
	next.Status.Devices = slices.DeleteFunc(next.Status.Devices, func(e resourceapi.AllocatedDeviceStatus) bool {
		return slices.ContainsFunc(devices, func(d resourceapi.AllocatedDeviceStatus) bool { return sameEntry(e, d) })
	})
	next.Status.Devices = append(next.Status.Devices, devices...)
	return next
}

// ErrNoEntry is SetDeviceCondition's error when the claim has no status
// entry for the device, or no allocation result naming it: there is
// nothing to put the condition on.
var ErrNoEntry = errors.New("the claim has no status entry for the device")

// ErrClaimGone is SetDeviceCondition's error when the claim is deleted or
// replaced by another of the same name.
var ErrClaimGone = errors.New("the claim is gone")

// DeviceRef names one device's entry in a claim's status: the slice pool
// (slicepool.SlicePool), the device and, for a shared device, its share
// ID.
type DeviceRef struct {
	Pool, Device, ShareID string
}

// SetDeviceCondition sets cond (meta.SetStatusCondition: the transition
// time kept while the status stays) on the status entry of dev in the
// claim namespace/name of that uid, with the claim's generation as its
// observedGeneration, and keeps every other condition and entry. The
// entry is the one of the driver the claim's allocation result for dev
// names. It writes only when the condition changed, and reports whether
// it did, with the claim as written (or as read, when nothing changed).
// A conflict retries from a fresh copy. ErrClaimGone and ErrNoEntry say
// why nothing could be set.
func (c *Claims) SetDeviceCondition(ctx context.Context, namespace, name string, uid types.UID, dev DeviceRef, cond metav1.Condition) (bool, *resourceapi.ResourceClaim, error) {
	return c.setDeviceCondition(ctx, namespace, name, uid, dev, cond, nil)
}

// ReplaceDeviceCondition is SetDeviceCondition of cond, done only when
// the entry holds a condition of cond's type whose status is from; an
// entry without one, or with another status, is left as it is (changed
// false, no error).
func (c *Claims) ReplaceDeviceCondition(ctx context.Context, namespace, name string, uid types.UID, dev DeviceRef, from metav1.ConditionStatus, cond metav1.Condition) (bool, *resourceapi.ResourceClaim, error) {
	return c.setDeviceCondition(ctx, namespace, name, uid, dev, cond, func(cur *metav1.Condition) bool {
		return cur != nil && cur.Status == from
	})
}

// setDeviceCondition sets cond on dev's entry when when (nil: always)
// holds of the entry's condition of cond's type (nil when it has none).
func (c *Claims) setDeviceCondition(ctx context.Context, namespace, name string, uid types.UID, dev DeviceRef, cond metav1.Condition, when func(*metav1.Condition) bool) (bool, *resourceapi.ResourceClaim, error) {
	claims := c.client.ResourceV1().ResourceClaims(namespace)
	var changed bool
	var out *resourceapi.ResourceClaim
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changed, out = false, nil
		cur, err := claims.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s/%s: %w", namespace, name, ErrClaimGone)
		}
		if err != nil {
			return err
		}
		if cur.UID != uid {
			return fmt.Errorf("claim %s/%s was replaced: %w", namespace, name, ErrClaimGone)
		}
		next := cur.DeepCopy()
		e := deviceEntry(next, dev)
		if e == nil {
			return fmt.Errorf("claim %s/%s, device %s of pool %s: %w", namespace, name, dev.Device, dev.Pool, ErrNoEntry)
		}
		if when != nil && !when(meta.FindStatusCondition(e.Conditions, cond.Type)) {
			out = cur
			return nil
		}
		cond.ObservedGeneration = next.Generation
		if !meta.SetStatusCondition(&e.Conditions, cond) {
			out = cur
			return nil
		}
		written, err := claims.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		changed, out = true, written
		return nil
	})
	return changed, out, err
}

// deviceEntry is claim's status entry for dev, of the driver its
// allocation result names, or nil.
func deviceEntry(claim *resourceapi.ResourceClaim, dev DeviceRef) *resourceapi.AllocatedDeviceStatus {
	if claim.Status.Allocation == nil {
		return nil
	}
	driver := ""
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Pool == dev.Pool && r.Device == dev.Device && string(ptrDeref(r.ShareID)) == dev.ShareID {
			driver = r.Driver
			break
		}
	}
	if driver == "" {
		return nil
	}
	for i := range claim.Status.Devices {
		e := &claim.Status.Devices[i]
		if e.Driver == driver && e.Pool == dev.Pool && e.Device == dev.Device && ptrDeref(e.ShareID) == dev.ShareID {
			return e
		}
	}
	return nil
}

func ptrDeref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Event implements driver.ClaimWriter.
func (c *Claims) Event(claim *resourceapi.ResourceClaim, eventType, reason, message string) {
	c.recorder.Event(claim, eventType, reason, message)
}

// PodLookup returns the pod, or an error when it is gone or replaced.
func (c *Claims) PodLookup(ctx context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error) {
	pod, err := c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if pod.UID != uid {
		return nil, fmt.Errorf("pod %s/%s was replaced", namespace, name)
	}
	return pod, nil
}

// NodeClaims returns the claims of the pods on node, direct and generated
// from templates, for restart recovery.
func NodeClaims(ctx context.Context, log *slog.Logger, client kubernetes.Interface, node string) ([]*resourceapi.ResourceClaim, error) {
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the node's pods: %w", err)
	}
	var out []*resourceapi.ResourceClaim
	for _, pod := range pods.Items {
		for _, rc := range pod.Spec.ResourceClaims {
			name := rc.ResourceClaimName
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == rc.Name && st.ResourceClaimName != nil {
					name = st.ResourceClaimName
				}
			}
			if name == nil {
				continue
			}
			claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("claim %s/%s: %w", pod.Namespace, *name, err)
			}
			out = append(out, claim)
		}
	}
	log.Info("Claims of the node's pods", "pods", len(pods.Items), "claims", len(out))
	return out, nil
}

// ClaimDriver returns the driver of the claim's allocated device (device of
// node's pool, by netdra's pool name: the result names its slice pool,
// slicepool.SlicePool), or "" when the claim (of that UID) or the device
// is gone.
func ClaimDriver(ctx context.Context, client kubernetes.Interface, namespace, name, uid, node, pool, device string) (string, error) {
	claim, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim %s/%s: %w", namespace, name, err)
	}
	if string(claim.UID) != uid || claim.Status.Allocation == nil {
		return "", nil
	}
	sp := slicepool.SlicePool(node, pool)
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Pool == sp && r.Device == device {
			return r.Driver, nil
		}
	}
	return "", nil
}
