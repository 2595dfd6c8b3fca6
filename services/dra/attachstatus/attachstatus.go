// Package attachstatus reports on each ResourceClaim whether nri got its
// devices into the pod's network namespace. nri attaches after the
// sandbox has started, where the claim's owner cannot see its failures;
// the state service records them on the allocation (attachError), and
// this package puts them on the claim: an Attached condition on the
// device's status entry (False with reason AttachFailed and the error as
// its message, True with reason Attached once the device is in the pod,
// False with reason Detached once it left the pod while the claim stays
// prepared) and one Warning event AttachFailed per distinct cause, not one
// per retry of the kubelet.
package attachstatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/claims"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/services/dra/slicepool"
)

// The condition on a device's status entry, and its reasons; the Warning
// event of a failed attach has reason ReasonAttachFailed.
const (
	ConditionAttached  = "Attached"
	ReasonAttached     = "Attached"
	ReasonAttachFailed = "AttachFailed"
	ReasonDetached     = "Detached"
)

// MsgAttached is the Attached condition's message once the device is in
// its pod's network namespace.
const MsgAttached = "in the pod's network namespace"

// MsgDetached is the Attached condition's message once the device left
// its pod's network namespace (the pod's sandbox stopped) and the claim
// is still prepared.
const MsgDetached = "out of the pod's network namespace: its pod's sandbox stopped"

// Source is the view of the state service's allocations;
// *publish.Publisher is one.
type Source interface {
	// View returns the current view and a channel closed at its next
	// change.
	View() (publish.View, <-chan struct{})
}

var _ Source = (*publish.Publisher)(nil)

// Writer writes the claims; *claims.Claims is one.
type Writer interface {
	// SetDeviceCondition sets cond on dev's status entry of the claim of
	// that uid, writing only a change, and reports whether it did.
	// claims.ErrClaimGone and claims.ErrNoEntry say there is nothing to
	// set it on.
	SetDeviceCondition(ctx context.Context, namespace, name string, uid types.UID, dev claims.DeviceRef, cond metav1.Condition) (bool, *resourceapi.ResourceClaim, error)
	// ReplaceDeviceCondition is SetDeviceCondition done only when the
	// entry's condition of cond's type has status from.
	ReplaceDeviceCondition(ctx context.Context, namespace, name string, uid types.UID, dev claims.DeviceRef, from metav1.ConditionStatus, cond metav1.Condition) (bool, *resourceapi.ResourceClaim, error)
	// Event records an event on the claim; best effort.
	Event(claim *resourceapi.ResourceClaim, eventType, reason, message string)
}

var _ Writer = (*claims.Claims)(nil)

// DefaultRetry is how long a write that failed waits before it is tried
// again.
const DefaultRetry = 5 * time.Second

// Reporter keeps the Attached conditions of node's claims in line with
// the allocations.
type Reporter struct {
	log   *slog.Logger
	src   Source
	w     Writer
	node  string
	retry time.Duration
}

// New returns a reporter of node's allocations in src, writing with w,
// trying a failed write again after retry (DefaultRetry when not
// positive).
func New(log *slog.Logger, src Source, w Writer, node string, retry time.Duration) *Reporter {
	if retry <= 0 {
		retry = DefaultRetry
	}
	return &Reporter{log: log, src: src, w: w, node: node, retry: retry}
}

// key names one allocation of one claim.
type key struct {
	claimUID, pool, device, shareID string
}

// outcome is the attach an allocation records: ok, or the error; or,
// detached, none: the device is prepared and in no pod.
type outcome struct {
	ok       bool
	err      string
	detached bool
}

// Outcome is what a's row says of its attach, and whether it says
// anything: a recorded failure (whatever the phase: it outlives the
// rollback), else success when it is ATTACHED; nothing for a row never
// attached.
func Outcome(a *statev1.Allocation) (ok bool, err string, known bool) {
	switch {
	case a.GetAttachError() != "":
		return false, a.GetAttachError(), true
	case a.GetPhase() == statev1.Phase_PHASE_ATTACHED:
		return true, "", true
	}
	return false, "", false
}

// Run reports until ctx ends, and returns ctx.Err(). It starts once the
// view is synced; after a restart every allocation's outcome is checked
// against its claim again, and written only where it differs, so a
// cause already on the claim gets no second event.
func (r *Reporter) Run(ctx context.Context) error {
	reported := map[key]outcome{}
	first := true
	for {
		v, changed := r.src.View()
		failed := false
		if v.Synced {
			failed = r.sync(ctx, v.Allocations, reported, first)
			first = first && failed
		}
		var again <-chan time.Time
		if failed {
			again = time.After(r.retry)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-again:
		}
	}
}

// sync reports each allocation whose outcome is not the one reported
// last, and forgets the allocations that are gone or say nothing. A
// prepared row in no pod is reported Detached only where the claim says
// Attached True: after an attach this reporter saw, or, on the first sync
// (start is true, as after a restart), where the claim's condition is
// True; a row prepared since, never attached, is not written. It reports
// whether a write failed and should be tried again.
func (r *Reporter) sync(ctx context.Context, allocs []*statev1.Allocation, reported map[key]outcome, start bool) (failed bool) {
	seen := map[key]bool{}
	for _, a := range allocs {
		if a.GetClaimUid() == "" {
			continue
		}
		ok, msg, known := Outcome(a)
		o := outcome{ok: ok, err: msg}
		if !known {
			if a.GetPhase() != statev1.Phase_PHASE_PREPARED {
				continue
			}
			o = outcome{detached: true}
		}
		k := key{a.GetClaimUid(), a.GetPool(), a.GetDeviceName(), a.GetShareId()}
		seen[k] = true
		prev, done := reported[k]
		if done && prev == o {
			continue
		}
		if o.detached && !(done && prev.ok) && !(!done && start) {
			reported[k] = o
			continue
		}
		err := r.report(ctx, a, o)
		switch {
		case err == nil, errors.Is(err, claims.ErrClaimGone):
			if err != nil {
				r.log.Debug("No claim status to report an attach on", "device", a.GetDeviceName(), "reason", err)
			}
			reported[k] = o
		case errors.Is(err, claims.ErrNoEntry):
			// The prepare's status write comes after the prepare
			// returned, and may not have landed yet: tried again.
			r.log.Debug("No status entry yet to report an attach on", "device", a.GetDeviceName(), "reason", err)
			failed = true
		default:
			r.log.Warn("Reporting an attach on its claim", "claim", a.GetClaimNamespace()+"/"+a.GetClaimName(),
				"device", a.GetDeviceName(), "error", err)
			failed = true
		}
	}
	for k := range reported {
		if !seen[k] {
			delete(reported, k)
		}
	}
	return failed
}

// report sets a's Attached condition to o, and records the Warning event
// when it turned to a new failure.
func (r *Reporter) report(ctx context.Context, a *statev1.Allocation, o outcome) error {
	dev := claims.DeviceRef{Pool: slicepool.SlicePool(r.node, a.GetPool()), Device: a.GetDeviceName(), ShareID: a.GetShareId()}
	ns, name, uid := a.GetClaimNamespace(), a.GetClaimName(), types.UID(a.GetClaimUid())
	if o.detached {
		changed, _, err := r.w.ReplaceDeviceCondition(ctx, ns, name, uid, dev, metav1.ConditionTrue, DetachedCondition())
		if err == nil && changed {
			r.log.Info("Device detached, on its claim", "claim", ns+"/"+name, "device", a.GetDeviceName())
		}
		return err
	}
	cond := Condition(o.ok, o.err)
	changed, claim, err := r.w.SetDeviceCondition(ctx, ns, name, uid, dev, cond)
	if err != nil {
		return err
	}
	if !changed {
		return nil
	}
	if o.ok {
		r.log.Info("Device attached, on its claim", "claim", a.GetClaimNamespace()+"/"+a.GetClaimName(), "device", a.GetDeviceName())
		return nil
	}
	r.log.Info("Failed attach, on its claim", "claim", a.GetClaimNamespace()+"/"+a.GetClaimName(), "device", a.GetDeviceName(),
		"error", o.err, "failures", a.GetAttachFailures())
	r.w.Event(claim, corev1.EventTypeWarning, ReasonAttachFailed, EventMessage(a.GetDeviceName(), o.err))
	return nil
}

// Condition is the Attached condition of a device whose attach succeeded
// (ok) or failed with msg.
func Condition(ok bool, msg string) metav1.Condition {
	if ok {
		return metav1.Condition{Type: ConditionAttached, Status: metav1.ConditionTrue, Reason: ReasonAttached, Message: MsgAttached}
	}
	return metav1.Condition{Type: ConditionAttached, Status: metav1.ConditionFalse, Reason: ReasonAttachFailed, Message: msg}
}

// DetachedCondition is the Attached condition of a device that left its
// pod while its claim stays prepared.
func DetachedCondition() metav1.Condition {
	return metav1.Condition{Type: ConditionAttached, Status: metav1.ConditionFalse, Reason: ReasonDetached, Message: MsgDetached}
}

// EventMessage is the message of the Warning event of device's failed
// attach.
func EventMessage(device, msg string) string {
	return fmt.Sprintf("device %s could not be put into the pod's network namespace: %s", device, msg)
}
