package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// statusAttempts is how many times a claim status write after a prepare
// is tried (waiting the driver's backoff between two) before it is left
// to the next start's recovery (fillStatus).
const statusAttempts = 5

// statusTimeout bounds one claim status write after a prepare.
const statusTimeout = 30 * time.Second

// writeStatusLater writes the Ready entries of a prepared claim (keys
// are their allocations' keys, as rowKey) in the background, after the
// prepare returned to the kubelet: what a restart needs is in the state
// service, committed before (the prepared device and config of each
// allocation), and the status serves the claim's readers and a rebuild
// after the state service lost its file. Each attempt runs under the
// claim's lock and writes only while every one of those allocations is
// still PREPARED or ATTACHED, so it never writes after the claim's
// unprepare. A write that keeps failing ends with a
// ReasonStatusNotWritten event on the claim.
func (d *Driver) writeStatusLater(log *slog.Logger, claim *resourceapi.ResourceClaim, keys []string, entries []resourceapi.AllocatedDeviceStatus) {
	d.statusWrites.Add(1)
	go func() {
		defer d.statusWrites.Done()
		// statusAttempts attempts, paced by the driver's retry policy.
		pace := d.retryBackoff()
		var err error
		for attempt := 1; ; attempt++ {
			var written bool
			if written, err = d.writeStatusOnce(claim, keys, entries); written {
				return
			}
			log.Warn("writing the claim status after its prepare failed", "attempt", attempt, "error", err)
			if attempt >= statusAttempts {
				break
			}
			time.Sleep(pace.Step())
		}
		d.claims.Event(claim, corev1.EventTypeWarning, ReasonStatusNotWritten,
			fmt.Sprintf("the claim is prepared, but its status could not be written (dra writes it at its next start): %v", err))
	}()
}

// writeStatusOnce is one attempt of writeStatusLater: done is true when
// the entries were written or need not be (the claim was unprepared or
// deleted meanwhile).
func (d *Driver) writeStatusOnce(claim *resourceapi.ResourceClaim, keys []string, entries []resourceapi.AllocatedDeviceStatus) (done bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	unlock, err := d.claimLocks.Lock(ctx, string(claim.UID))
	if err != nil {
		return false, err
	}
	defer unlock()
	rows, err := d.listAllocations(ctx, &statev1.ListAllocationsRequest{ClaimUid: string(claim.UID)})
	if err != nil {
		return false, err
	}
	held := map[string]bool{}
	for _, row := range rows {
		if ph := row.GetPhase(); ph == statev1.Phase_PHASE_PREPARED || ph == statev1.Phase_PHASE_ATTACHED {
			held[rowKey(row)] = true
		}
	}
	for _, k := range keys {
		if !held[k] {
			return true, nil
		}
	}
	err = d.claims.UpdateDeviceStatus(ctx, claim, entries)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return err == nil, err
}

// fillStatus writes the Ready entries that a prepared claim's status
// lacks, from its PREPARED and ATTACHED allocations (the prepared device
// and config the commit recorded): a crash, or writes that kept failing,
// between a prepare's commit and its status write left them out. claims
// are the node's pods' claims; a claim not among them is left alone. rows
// are the node's allocations.
func (d *Driver) fillStatus(ctx context.Context, claims []*resourceapi.ResourceClaim, rows []*statev1.Allocation) error {
	byClaim := map[string][]*statev1.Allocation{}
	for _, row := range rows {
		if ph := row.GetPhase(); ph == statev1.Phase_PHASE_PREPARED || ph == statev1.Phase_PHASE_ATTACHED {
			byClaim[row.GetClaimUid()] = append(byClaim[row.GetClaimUid()], row)
		}
	}
	var errs []error
	for _, c := range claims {
		if c == nil || len(byClaim[string(c.UID)]) == 0 {
			continue
		}
		if err := d.fillClaimStatus(ctx, c, byClaim[string(c.UID)]); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: writing its status: %w", c.Namespace, c.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) fillClaimStatus(ctx context.Context, c *resourceapi.ResourceClaim, rows []*statev1.Allocation) error {
	unlock, err := d.claimLocks.Lock(ctx, string(c.UID))
	if err != nil {
		return err
	}
	defer unlock()
	var entries []resourceapi.AllocatedDeviceStatus
	for _, row := range rows {
		if d.readyData(c, row.GetPool(), row.GetDeviceName()) != nil {
			continue
		}
		ref := deviceRef{request: row.GetRequest(), pool: row.GetPool(), device: row.GetDeviceName()}
		if row.GetShareId() != "" {
			ref.shareID = ptr.To(row.GetShareId())
		}
		e, err := d.readyEntry(c, ref, row.GetPreparedDevice(), row.GetConfig())
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil
	}
	if err := d.claims.UpdateDeviceStatus(ctx, c, entries); err != nil {
		return err
	}
	d.log.Info("claim status written at recovery", "claim", c.Namespace+"/"+c.Name, "claimUID", c.UID, "devices", len(entries))
	return nil
}
