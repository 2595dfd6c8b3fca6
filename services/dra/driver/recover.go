package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/services/dra/statusdata"
)

// Recover reconciles the state service with the cluster after a restart;
// claims are the ResourceClaims of the pods still on this node. Call it
// before serving the kubelet. Idempotent.
//
// When the state holds allocations, they are trusted and only the intents
// (PREPARING) are settled, as a prepare that a crash interrupted:
//
//   - the claim status has this driver's Ready entry with data for the
//     device: Setup and the status write happened, only the commit did
//     not; the allocation is committed with the prepared device recorded
//     on the intent (state.RecordPrepared), or, when none was, with the
//     status data's, once the provisioner's Restore has checked it;
//   - otherwise the prepare never reached the cluster: the device is freed
//     with the prepared device recorded on the intent after Setup
//     (state.RecordPrepared), or, when the crash came before Setup
//     returned, with a guessed one (see guessPrepared), and the intent
//     aborted. A Free that fails leaves it FREEING_FAILED for Run.
//
// When the state holds no allocation at all (a node reboot, a lost state
// file), every Ready entry of this driver with data, for a device the
// claim's allocation still lists, is restored as a PREPARED allocation,
// if it passes the checks: anyone who can write a claim's status can
// write that data, and nri would move the device it names into the pod.
// The claim must be reserved for exactly one pod, which exists and is not
// on the host network; the provisioner's Restore must accept the prepared
// device (a device its managers offer now, the same kernel object, shaped
// as its manager's Setup makes them); it must be the entry's device, and
// the entry's pool must be configured and select it. A device that fails
// is not restored and nothing is done to it: a RecoveryRefused event on
// the claim says why, and Recover goes on.
//
// A prepare writes the claim status after its commit, once it returned
// (writeStatusLater): an intent whose claim status has the Ready entry
// was left by an earlier release, which wrote the status before the
// commit. The Ready entries that a prepared claim's status lacks (a
// crash between the commit and the status write) are written from its
// allocations (fillStatus).
//
// Then the CDI specs are made to match the prepared claims (syncSpecs).
//
// The error joins what could not be done; the rest is done.
func (d *Driver) Recover(ctx context.Context, claims []*resourceapi.ResourceClaim) error {
	err := d.recoverAllocations(ctx, claims)
	rows, lerr := d.listAllocations(ctx, &statev1.ListAllocationsRequest{})
	if lerr != nil {
		return errors.Join(err, lerr)
	}
	return errors.Join(err, d.fillStatus(ctx, claims, rows), d.syncSpecs(rows))
}

func (d *Driver) recoverAllocations(ctx context.Context, claims []*resourceapi.ResourceClaim) error {
	rows, err := d.listAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return d.rebuild(ctx, claims)
	}
	byUID := map[string]*resourceapi.ResourceClaim{}
	for _, c := range claims {
		if c != nil {
			byUID[string(c.UID)] = c
		}
	}
	var errs []error
	for _, row := range rows {
		if row.GetPhase() != statev1.Phase_PHASE_PREPARING {
			continue
		}
		if err := d.recoverIntent(ctx, row, byUID[row.GetClaimUid()]); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s, device %s: %w", row.GetClaimNamespace(), row.GetClaimName(), row.GetDeviceName(), err))
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) recoverIntent(ctx context.Context, row *statev1.Allocation, claim *resourceapi.ResourceClaim) error {
	unlock, err := d.claimLocks.Lock(ctx, row.GetClaimUid())
	if err != nil {
		return err
	}
	defer unlock()
	log := d.log.With("claim", row.GetClaimNamespace()+"/"+row.GetClaimName(), "claimUID", row.GetClaimUid())
	_, _, err = d.settleIntent(ctx, log, row, claim)
	return err
}

// settleIntent resolves an intent left by an interrupted prepare: restored
// from the claim's status data when there is any (restored is the row,
// now PREPARED), else released (freeErr when its Free failed and it was
// kept for Run). claim may be nil.
func (d *Driver) settleIntent(ctx context.Context, log *slog.Logger, row *statev1.Allocation, claim *resourceapi.ResourceClaim) (restored *statev1.Allocation, freeErr, err error) {
	log = log.With("device", row.GetDeviceName(), "pool", row.GetPool())
	if data := d.readyData(claim, row.GetPool(), row.GetDeviceName()); data != nil {
		pd, cfg, err := d.restoreData(ctx, row.GetDeviceName(), data)
		switch {
		case err == nil:
			r := proto.CloneOf(row)
			r.Phase = statev1.Phase_PHASE_UNSPECIFIED
			if r.PreparedDevice == nil {
				// Setup's reply was never recorded; the checked status
				// data is all there is.
				r.PreparedDevice = pd
			}
			if r.Config == nil {
				r.Config = cfg
			}
			if _, err := d.allocs.RestoreAllocations(ctx, &statev1.RestoreAllocationsRequest{Allocations: []*statev1.Allocation{r}}); err != nil {
				return nil, nil, callErr("restoring the allocation", err)
			}
			r.Phase = statev1.Phase_PHASE_PREPARED
			log.Info("interrupted prepare completed from the claim status")
			return r, nil, nil
		case !errors.Is(err, ErrBadStatusData):
			return nil, nil, err
		}
		log.Warn("claim status data is unusable; rolling the prepare back", "error", err)
	}
	log.Info("rolling back an interrupted prepare")
	freeErr, err = d.release(ctx, log, row)
	return nil, freeErr, err
}

// restoreData rebuilds a prepared device and its config from a status
// entry's data, which anyone who can write the claim's status may have
// written: the provisioner's Restore checks the prepared device against
// its inventory and the device's manager (and answers with the
// inventory's copy of the device), and it must be the device the entry is
// for. Data that will never do is ErrBadStatusData; other errors may pass.
func (d *Driver) restoreData(ctx context.Context, device string, data []byte) (*devicev1.PreparedDevice, *devicev1.DeviceConfig, error) {
	raw, cfg, err := statusdata.Decode(data)
	if err != nil {
		return nil, nil, err
	}
	resp, err := d.prov.Restore(ctx, &provisionerv1.RestoreRequest{Data: raw})
	if status.Code(err) == codes.InvalidArgument {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadStatusData, callErr("the provisioner refused the prepared device", err))
	}
	if err != nil {
		return nil, nil, callErr("restoring the prepared device", err)
	}
	pd := resp.GetPreparedDevice()
	if n := pd.GetDevice().GetName(); n != device {
		return nil, nil, fmt.Errorf("%w: prepared device %q for device %q", ErrBadStatusData, n, device)
	}
	return pd, cfg, nil
}

// rebuild restores the allocations of every claim from its status.
func (d *Driver) rebuild(ctx context.Context, claims []*resourceapi.ResourceClaim) error {
	var errs []error
	for _, c := range claims {
		if c == nil || c.Status.Allocation == nil {
			continue
		}
		if err := d.rebuildClaim(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// rebuildClaim restores the claim's allocations from its status, after
// checking what it reads there as a prepare checks a claim (reservedFor
// names exactly one pod, that pod exists and is not on the host network)
// and each device's data (restoreData; its pool is configured and selects
// the device). A device whose data fails a check is not restored, and
// nothing is done to it: it is refused with a RecoveryRefused event on the
// claim. The error is what may pass (a call that failed).
func (d *Driver) rebuildClaim(ctx context.Context, c *resourceapi.ResourceClaim) error {
	unlock, err := d.claimLocks.Lock(ctx, string(c.UID))
	if err != nil {
		return err
	}
	defer unlock()
	var allocs []*statev1.Allocation
	var errs []error
	var p *preparation
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		pool, err := slicepool.Of(d.node, r.Pool)
		if err != nil { // not this node's device: nothing done to it
			errs = append(errs, d.refuse(c, r.Device, fmt.Errorf("%w: %w", ErrBadStatusData, err)))
			continue
		}
		data := d.readyData(c, pool, r.Device)
		if data == nil {
			continue
		}
		if p == nil {
			if p, err = d.recoveryPlan(ctx, c); err != nil {
				return d.refuse(c, "", err)
			}
		}
		pd, cfg, err := d.restoreData(ctx, r.Device, data)
		if err == nil {
			err = d.checkPool(pool, pd.GetDevice())
		}
		if err != nil {
			errs = append(errs, d.refuse(c, r.Device, err))
			continue
		}
		allocs = append(allocs, &statev1.Allocation{
			Pool: pool, DeviceName: r.Device, Manager: pd.GetDevice().GetManager(),
			ClaimUid: string(c.UID), ClaimNamespace: c.Namespace, ClaimName: c.Name,
			Request: r.Request, PodUid: p.podUID, Config: cfg, PreparedDevice: pd,
			ShareId: pd.GetDevice().GetShare().GetId(),
		})
	}
	if len(allocs) > 0 {
		resp, err := d.allocs.RestoreAllocations(ctx, &statev1.RestoreAllocationsRequest{Allocations: allocs})
		if err != nil {
			errs = append(errs, callErr("restoring allocations", err))
		} else {
			d.log.Info("allocations restored from the claim status", "claim", c.Namespace+"/"+c.Name, "claimUID", c.UID, "restored", resp.GetRestored())
		}
	}
	return errors.Join(errs...)
}

// recoveryPlan checks the claim's pod as a prepare does (podFromClaim,
// checkPod). A claim that is not reserved for exactly one pod off the host
// network is ErrBadStatusData.
func (d *Driver) recoveryPlan(ctx context.Context, c *resourceapi.ResourceClaim) (*preparation, error) {
	p := &preparation{claim: c}
	err := p.podFromClaim()
	if err == nil {
		err = d.checkPod(ctx, p)
	}
	if errors.Is(err, ErrNotOnePod) || errors.Is(err, ErrHostNetwork) || errors.Is(err, errWrongPod) {
		return nil, fmt.Errorf("%w: %w", ErrBadStatusData, err)
	}
	return p, err
}

// checkPool checks that pool is a configured pool whose filter selects
// dev (the provisioner's copy): a status cannot move a device into a pool
// that does not offer it.
func (d *Driver) checkPool(pool string, dev *devicev1.Device) error {
	for _, p := range d.pools {
		if p.Name != pool {
			continue
		}
		if !p.Filter.Matches(dev) {
			return fmt.Errorf("%w: pool %q does not select device %s", ErrBadStatusData, pool, dev.GetName())
		}
		return nil
	}
	return fmt.Errorf("%w: no pool %q is configured on this node", ErrBadStatusData, pool)
}

// refuse records that the claim's device (or the whole claim, for device
// "") is not restored because err, when err is ErrBadStatusData: a Warning
// event on the claim and a log line; it returns nil then, and err
// otherwise.
func (d *Driver) refuse(c *resourceapi.ResourceClaim, device string, err error) error {
	if !errors.Is(err, ErrBadStatusData) {
		if device != "" {
			return fmt.Errorf("device %s: %w", device, err)
		}
		return err
	}
	msg := "not restored after a restart, nothing done to its devices: " + err.Error()
	if device != "" {
		msg = "device " + device + " " + msg
	}
	d.log.Warn("Claim status refused at recovery", "claim", c.Namespace+"/"+c.Name, "claimUID", c.UID, "device", device, "error", err)
	d.claims.Event(c, corev1.EventTypeWarning, ReasonRecoveryRefused, msg)
	return nil
}

// syncSpecs writes the CDI spec of every prepared claim again (a node
// reboot emptied /var/run/cdi; a spec may be stale) and removes every
// netdra spec of a claim that is not prepared: one a crash left between
// writing it and the claim status, or one whose unprepare was missed.
// A claim with a device still being freed (FREEING_FAILED) or an intent
// keeps no spec.
// rows are the node's allocations.
func (d *Driver) syncSpecs(rows []*statev1.Allocation) error {
	if d.cdi == nil {
		return nil
	}
	byClaim := map[string][]cdispec.Device{}
	unusable := map[string]bool{}
	for _, row := range rows {
		switch row.GetPhase() {
		case statev1.Phase_PHASE_PREPARED, statev1.Phase_PHASE_ATTACHED:
			byClaim[row.GetClaimUid()] = append(byClaim[row.GetClaimUid()],
				cdispec.Device{Request: row.GetRequest(), Name: row.GetDeviceName(), Prepared: row.GetPreparedDevice(),
					IfName: podIfName(row.GetPreparedDevice(), row.GetConfig())})
		default:
			unusable[row.GetClaimUid()] = true
		}
	}
	var errs []error
	keep := map[string]bool{}
	for uid, devs := range byClaim {
		if unusable[uid] {
			continue
		}
		keep[uid] = true
		if _, err := d.cdi.Write(uid, devs); err != nil {
			errs = append(errs, err)
		}
	}
	removed, err := d.cdi.Sweep(keep)
	if len(removed) > 0 {
		d.log.Info("removed the CDI specs of claims that are not prepared", "claimUIDs", removed)
	}
	return errors.Join(append(errs, err)...)
}
