package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// A failed prepare is undone here: what it set up is freed, its intents
// aborted, and a device whose Free fails is kept for Run to retry.

// rollback is how far a prepare got.
type rollback struct {
	p    *preparation
	devs []*devicev1.Device
	// prepared[i] is device i as Setup left it.
	prepared []*devicev1.PreparedDevice
	// uncertain is the device whose Setup reply was lost, or -1.
	uncertain     int
	specWritten   bool
	statusWritten bool
}

// rollBack undoes a failed prepare and returns cause, with what could not
// be undone appended. In order: a claim status that was written is marked
// not Ready (so recovery never restores it); the devices are freed in
// reverse (the CDI spec removed first; the uncertain one with a prepared device guessed from the
// inventory, see guessPrepared); the intents are aborted. A device whose
// Free fails keeps its row, committed with its prepared device and marked
// FREEING_FAILED, for Run to retry.
func (d *Driver) rollBack(ctx context.Context, log *slog.Logger, rb *rollback, cause error) error {
	ctx, cancel := d.cleanupContext(ctx)
	defer cancel()
	log.Warn("prepare failed; rolling back", "error", cause, "setUp", len(rb.prepared))
	p := rb.p
	var problems []string
	if rb.statusWritten {
		entries := make([]resourceapi.AllocatedDeviceStatus, len(p.devices))
		for i, dev := range p.devices {
			entries[i] = d.rolledBackEntry(p.claim, dev.deviceRef, cause)
		}
		if err := d.claims.UpdateDeviceStatus(ctx, p.claim, entries); err != nil {
			problems = append(problems, fmt.Sprintf("marking the claim status not ready: %v", err))
		}
	}
	if rb.specWritten {
		if err := d.cdi.Remove(string(p.claim.UID)); err != nil {
			problems = append(problems, err.Error())
		}
	}
	failed := d.freeAll(ctx, rb)
	abort := &statev1.AbortPrepareRequest{ClaimUid: string(p.claim.UID)}
	for i, dev := range p.devices {
		if _, ok := failed[i]; !ok {
			abort.Keys = append(abort.Keys, dev.allocKey())
		}
	}
	if err := d.abort(ctx, abort); err != nil {
		problems = append(problems, err.Error())
	}
	for i, f := range failed {
		dev := p.devices[i]
		problems = append(problems, fmt.Sprintf("device %s stays set up, retried in the background: %v", dev.device, f.err))
		if err := d.keepForRetry(ctx, string(p.claim.UID), dev.deviceRef, f.pd, f.err); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		log.Error("rollback incomplete", "problems", problems)
		return fmt.Errorf("%w (rollback: %s)", cause, strings.Join(problems, "; "))
	}
	return cause
}

// failedFree is a device Free failed for; pd is nil for a guessed one.
type failedFree struct {
	pd  *devicev1.PreparedDevice
	err error
}

// freeAll frees the devices of a failed prepare in reverse order of setup
// and returns the ones whose Free failed, by index.
func (d *Driver) freeAll(ctx context.Context, rb *rollback) map[int]failedFree {
	failed := map[int]failedFree{}
	if i := rb.uncertain; i >= 0 {
		if pd, ok := guessPrepared(rb.devs[i]); ok {
			if _, err := d.free(ctx, pd, rb.p.devices[i].config); err != nil {
				failed[i] = failedFree{err: err}
			}
		}
	}
	for i := len(rb.prepared) - 1; i >= 0; i-- {
		if _, err := d.free(ctx, rb.prepared[i], rb.p.devices[i].config); err != nil {
			failed[i] = failedFree{pd: rb.prepared[i], err: err}
		}
	}
	return failed
}

// abort deletes the intents; intents that were committed after all (a
// commit whose reply was lost) are deleted as allocations.
func (d *Driver) abort(ctx context.Context, req *statev1.AbortPrepareRequest) error {
	if len(req.GetKeys()) == 0 {
		return nil
	}
	_, err := d.intents.AbortPrepare(ctx, req)
	if status.Code(err) == codes.FailedPrecondition {
		err = nil
		for _, k := range req.GetKeys() {
			_, e := d.allocs.DeleteAllocation(ctx, &statev1.DeleteAllocationRequest{Key: k, ClaimUid: req.GetClaimUid()})
			err = errors.Join(err, e)
		}
	}
	return callErr("aborting the intents", err)
}

// keepForRetry leaves a device whose Free failed in the state as
// FREEING_FAILED, with its prepared device when known, for Run.
func (d *Driver) keepForRetry(ctx context.Context, claimUID string, dev deviceRef, pd *devicev1.PreparedDevice, freeErr error) error {
	if pd != nil {
		_, err := d.intents.CommitPrepare(ctx, &statev1.CommitPrepareRequest{ClaimUid: claimUID,
			Allocations: []*statev1.PreparedAllocation{{Key: dev.allocKey(), PreparedDevice: pd}}})
		if err != nil {
			return callErr("recording device "+dev.device+" for a retry", err)
		}
	}
	return d.markFreeFailed(ctx, dev.allocKey(), freeErr)
}
