package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// A failed prepare is undone here: what it set up is freed, its intents
// aborted, and a device whose Free fails is kept for Run to retry.

// rollback is how far a prepare got. Its claim's Setups ran at once, so
// any subset of its devices may be set up, and any subset uncertain.
type rollback struct {
	p    *preparation
	devs []*devicev1.Device
	// prepared[i] is device i as its Setup left it, nil when its Setup
	// failed.
	prepared []*devicev1.PreparedDevice
	// uncertain[i] says that device i's Setup reply was lost: it may be
	// set up, and no prepared device says how.
	uncertain   []bool
	specWritten bool
}

// setUpCount is how many devices Setup is known to have set up.
func (rb *rollback) setUpCount() int {
	n := 0
	for _, pd := range rb.prepared {
		if pd != nil {
			n++
		}
	}
	return n
}

// rollBack undoes a failed prepare and returns cause, with what could not
// be undone appended. A failed prepare never wrote the claim status (it
// is written once the intents are committed). In order: the CDI spec is
// removed; the
// devices that may be set up are freed (freeAll); the intents are
// aborted. A device whose Free fails keeps its row, committed with its
// prepared device and marked FREEING_FAILED, for Run to retry.
func (d *Driver) rollBack(ctx context.Context, log *slog.Logger, rb *rollback, cause error) error {
	ctx, cancel := d.cleanupContext(ctx)
	defer cancel()
	log.Warn("prepare failed; rolling back", "error", cause, "setUp", rb.setUpCount())
	p := rb.p
	var problems []string
	if rb.specWritten {
		if err := d.cdi.Remove(string(p.claim.UID)); err != nil {
			problems = append(problems, err.Error())
		}
	}
	failed := d.freeAll(ctx, log, rb)
	abort := &statev1.AbortPrepareRequest{ClaimUid: string(p.claim.UID)}
	for i, dev := range p.devices {
		if _, ok := failed[i]; !ok {
			abort.Keys = append(abort.Keys, dev.allocKey())
		}
	}
	if err := d.abort(ctx, abort); err != nil {
		problems = append(problems, err.Error())
	}
	for i, dev := range p.devices {
		f, ok := failed[i]
		if !ok {
			continue
		}
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

// freeAll frees, once each and in reverse order of the claim, every
// device of a failed prepare that may be set up: one Setup set up, with
// the prepared device it returned; one whose Setup reply was lost, with a
// prepared device guessed from the inventory (guessPrepared; one that
// cannot be guessed is left as it is, with a warning, as at recovery).
// A device whose Setup failed is not freed: a provisioner call that fails
// part-way restores what it changed. It returns the devices whose Free
// failed, by index.
func (d *Driver) freeAll(ctx context.Context, log *slog.Logger, rb *rollback) map[int]failedFree {
	failed := map[int]failedFree{}
	for i := len(rb.p.devices) - 1; i >= 0; i-- {
		pd, known := rb.prepared[i], rb.prepared[i] != nil
		if !known && rb.uncertain[i] {
			var ok bool
			if pd, ok = guessPrepared(rb.devs[i]); !ok {
				log.Warn("the device's Setup has an unknown outcome (its reply was lost): what it may have changed cannot be restored",
					"device", rb.p.devices[i].device, "manager", rb.devs[i].GetManager())
			}
		}
		if pd == nil {
			continue
		}
		if _, err := d.free(ctx, pd, rb.p.devices[i].config); err != nil {
			f := failedFree{err: err}
			if known {
				f.pd = pd
			}
			failed[i] = f
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
