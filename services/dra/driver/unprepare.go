package driver

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// unprepareClaim releases every allocation of the claim and removes its
// CDI spec.
func (d *Driver) unprepareClaim(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	unlock, err := d.claimLocks.Lock(ctx, string(c.UID))
	if err != nil {
		return err
	}
	defer unlock()
	log := d.log.With("claim", c.Namespace+"/"+c.Name, "claimUID", c.UID)
	rows, err := d.listAllocations(ctx, &statev1.ListAllocationsRequest{ClaimUid: string(c.UID)})
	if err != nil {
		return err
	}
	var errs []error
	freed := 0
	for _, row := range rows {
		freeErr, err := d.release(ctx, log, row)
		if err != nil {
			errs = append(errs, err)
		} else if freeErr == nil {
			freed++
		}
	}
	if len(rows) > 0 {
		log.Info("claim unprepared", "freed", freed, "retrying", len(rows)-freed-len(errs))
	}
	// The claim's containers are gone: its CDI spec goes, whether or not
	// a device is still being freed.
	if d.cdi != nil {
		errs = append(errs, d.cdi.Remove(string(c.UID)))
	}
	return errors.Join(errs...)
}

// release frees an allocation's device and deletes the allocation (aborts
// it, for an intent). When Free fails, the allocation is kept as
// FREEING_FAILED for Run and freeErr says why; err is set only when the
// state service could not be read or updated.
//
// An allocation with no prepared device is an intent whose prepare was
// interrupted (or one that stayed after a failed rollback): its device is
// freed with the prepared device guessPrepared makes from the inventory.
func (d *Driver) release(ctx context.Context, log *slog.Logger, row *statev1.Allocation) (freeErr, err error) {
	key := allocKey(row)
	log = log.With("device", row.GetDeviceName(), "pool", row.GetPool())
	pd := row.GetPreparedDevice()
	if pd == nil {
		dev, err := d.deviceOf(ctx, row)
		if err != nil {
			return nil, err
		}
		var ok bool
		if pd, ok = guessPrepared(dev); !ok {
			log.Warn("the device's prepare was interrupted before its prepared device was recorded: what Setup changed on it cannot be restored", "manager", dev.GetManager())
		}
	}
	if pd != nil {
		lost, freeErr := d.free(ctx, pd, row.GetConfig())
		if freeErr != nil {
			log.Warn("freeing the device failed; retrying in the background", "error", freeErr)
			return freeErr, d.markFreeFailed(ctx, key, freeErr)
		}
		if lost {
			d.reportLost(log, row)
		}
	}
	if row.GetPhase() == statev1.Phase_PHASE_PREPARING {
		err = d.abort(ctx, &statev1.AbortPrepareRequest{ClaimUid: row.GetClaimUid(), Keys: []*statev1.AllocationKey{key}})
	} else {
		_, err = d.allocs.DeleteAllocation(ctx, &statev1.DeleteAllocationRequest{Key: key, ClaimUid: row.GetClaimUid()})
		err = callErr("deleting the allocation of "+row.GetDeviceName(), err)
	}
	if err != nil {
		return nil, err
	}
	d.retries.forget(scheduleKey(row))
	log.Debug("device freed")
	return nil, nil
}

// guessPrepared makes the prepared device that Free needs for a device
// whose real one was never recorded (a crash while Setup ran, before
// RecordPrepared, or a Setup whose reply was lost). Only a dummy device can be
// undone without it: a dummy's Setup changes nothing on the node (its link
// is made in the pod at Attach), so Free of the guess undoes it exactly.
// What Setup changed on an SR-IOV VF or a host interface is known only from
// the original state its prepared device records; ok is false for them.
func guessPrepared(dev *devicev1.Device) (pd *devicev1.PreparedDevice, ok bool) {
	if dev.GetManager() != devicev1.DeviceManager_DEVICE_MANAGER_DUMMY {
		return nil, false
	}
	dev = proto.CloneOf(dev)
	if dev.KernelIfName == "" {
		dev.KernelIfName = dev.GetName() // a dummy link is named as its device
	}
	return &devicev1.PreparedDevice{Device: dev, LinkCreated: true, OriginalLink: &devicev1.LinkSnapshot{Name: dev.KernelIfName}}, true
}

// deviceOf returns the allocation's device from the inventory, or as much
// of it as the allocation knows.
func (d *Driver) deviceOf(ctx context.Context, row *statev1.Allocation) (*devicev1.Device, error) {
	inv, err := d.inventory(ctx, []string{row.GetDeviceName()})
	if err != nil {
		return nil, err
	}
	if dev := inv[row.GetDeviceName()]; dev != nil {
		return dev, nil
	}
	return &devicev1.Device{Name: row.GetDeviceName(), Manager: row.GetManager()}, nil
}

// free frees the device; lost says the provisioner found it lost.
func (d *Driver) free(ctx context.Context, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) (lost bool, err error) {
	resp, err := d.prov.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg})
	return resp.GetDeviceLost(), callErr("freeing device "+pd.GetDevice().GetName(), err)
}

// reportLost says that row's device was found lost at its Free: in the
// log, the metric and an event on its claim.
func (d *Driver) reportLost(log *slog.Logger, row *statev1.Allocation) {
	msg := "device " + row.GetDeviceName() + " is lost: its link was destroyed with a pod netns the runtime tore down while netdra held no handle on it; it is offered again once its manager makes it again"
	log.Error("Device lost", "reason", msg)
	if d.onLost != nil {
		d.onLost()
	}
	claim := &resourceapi.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: row.GetClaimNamespace(), Name: row.GetClaimName(), UID: types.UID(row.GetClaimUid())},
	}
	d.claims.Event(claim, corev1.EventTypeWarning, ReasonDeviceLost, msg)
}

// markFreeFailed records a failed Free and schedules the next attempt.
func (d *Driver) markFreeFailed(ctx context.Context, key *statev1.AllocationKey, freeErr error) error {
	resp, err := d.allocs.MarkFreeFailed(ctx, &statev1.MarkFreeFailedRequest{Key: key, Error: freeErr.Error()})
	if err != nil {
		return callErr("recording the failed free of "+key.GetDeviceName(), err)
	}
	d.retries.set(keyString(key.GetPool(), key.GetDeviceName(), key.GetShareId()), d.now().Add(d.backoff(resp.GetAttempts())))
	select {
	case d.kick <- struct{}{}:
	default:
	}
	return nil
}

// retryBackoff is the driver's retry policy, stepped once per failed
// attempt: RetryBase doubled per step, at most RetryMax, without jitter.
func (d *Driver) retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: d.retryBase, Factor: 2, Steps: math.MaxInt32, Cap: d.retryMax}
}

// backoff is the wait after the given number of failed attempts: the
// attempts-th step of retryBackoff. It takes a count because the count of
// a failed Free is kept in the state service, across restarts.
func (d *Driver) backoff(attempts uint32) time.Duration {
	b := d.retryBackoff()
	delay := b.Step()
	for i := uint32(1); i < attempts && delay < d.retryMax; i++ {
		delay = b.Step()
	}
	return delay
}

func scheduleKey(row *statev1.Allocation) string { return rowKey(row) }

// Run retries the Free of FREEING_FAILED allocations until ctx ends, each
// with its own backoff (RetryBase doubled per failed attempt, at most
// RetryMax); when Free succeeds the allocation is deleted. It looks for new
// FREEING_FAILED allocations at least every RetryMax, and at once when this
// driver records one. It returns nil when ctx ends.
func (d *Driver) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	listBackoff := d.retryBackoff()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.kick:
		case <-timer.C:
		}
		wait, err := d.retryFreeing(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			wait = listBackoff.Step()
			d.log.Warn("listing allocations to free", "error", err, "retryIn", wait)
		default:
			listBackoff = d.retryBackoff()
		}
		timer.Reset(wait)
	}
}

// retryFreeing retries the allocations that are due and returns how long
// to wait for the next one; err is set when the allocations could not be
// listed.
func (d *Driver) retryFreeing(ctx context.Context) (time.Duration, error) {
	rows, err := d.listAllocations(ctx, &statev1.ListAllocationsRequest{Phase: statev1.Phase_PHASE_FREEING_FAILED})
	if err != nil {
		return 0, err
	}
	next := d.retryMax
	seen := map[string]bool{}
	for _, row := range rows {
		if ctx.Err() != nil {
			return next, nil
		}
		k := scheduleKey(row)
		seen[k] = true
		if due, ok := d.retries.get(k); ok && d.now().Before(due) {
			next = min(next, due.Sub(d.now()))
			continue
		}
		d.retryOne(ctx, row)
		if due, ok := d.retries.get(k); ok {
			next = min(next, max(due.Sub(d.now()), 0))
		}
	}
	d.retries.keep(seen)
	return next, nil
}

// retryOne frees one FREEING_FAILED allocation under its claim's lock, if
// it is still FREEING_FAILED then.
func (d *Driver) retryOne(ctx context.Context, row *statev1.Allocation) {
	unlock, err := d.claimLocks.Lock(ctx, row.GetClaimUid())
	if err != nil {
		return
	}
	defer unlock()
	log := d.log.With("claimUID", row.GetClaimUid(), "claim", row.GetClaimNamespace()+"/"+row.GetClaimName(), "attempts", row.GetAttempts())
	rows, err := d.listAllocations(ctx, &statev1.ListAllocationsRequest{ClaimUid: row.GetClaimUid(), Phase: statev1.Phase_PHASE_FREEING_FAILED})
	if err != nil {
		log.Warn("listing the claim's allocations to free", "error", err)
		d.retries.set(scheduleKey(row), d.now().Add(d.retryBase))
		return
	}
	for _, cur := range rows {
		if cur.GetPool() != row.GetPool() || cur.GetDeviceName() != row.GetDeviceName() {
			continue
		}
		if freeErr, err := d.release(ctx, log, cur); err != nil {
			log.Warn("retrying a failed free", "device", cur.GetDeviceName(), "error", err)
			d.retries.set(scheduleKey(row), d.now().Add(d.backoff(cur.GetAttempts()+1)))
		} else if freeErr == nil {
			log.Info("freed the device after failed attempts", "device", cur.GetDeviceName())
		}
		return
	}
	d.retries.forget(scheduleKey(row))
}
