package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/shared/fanout"
	"github.com/netdra/netdra/shared/rpc"
)

// prepareClaim prepares the claim's devices of this driver, or leaves
// nothing changed and returns why not.
func (d *Driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	unlock, err := d.claimLocks.Lock(ctx, string(claim.UID))
	if err != nil {
		return nil, err
	}
	defer unlock()
	log := d.log.With("claim", claim.Namespace+"/"+claim.Name, "claimUID", claim.UID)
	p, err := d.makePreparation(claim)
	if err != nil {
		return nil, err
	}
	if len(p.devices) == 0 {
		return []kubeletplugin.Device{}, nil
	}
	log = log.With("pod", p.podName, "podUID", p.podUID)
	unlockPod, err := d.podLocks.Lock(ctx, p.podUID)
	if err != nil {
		return nil, err
	}
	p.unlockPod = sync.OnceFunc(unlockPod)
	defer p.unlockPod()
	r, err := d.read(ctx, p)
	if err != nil {
		return nil, err
	}
	p.steps.done("reads")
	kept, err := d.reuse(ctx, log, p, r.claimRows)
	if err != nil {
		return nil, err
	}
	var pds []*devicev1.PreparedDevice
	var ids map[string]string
	if kept != nil {
		// Prepared before (a kubelet or node restart): its CDI spec is
		// written again, the same.
		p.unlockPod()
		pds = preparedInPlanOrder(p, kept)
		if ids, err = d.writeSpec(p, pds); err != nil {
			return nil, err
		}
	} else {
		if pds, ids, err = d.prepareFresh(ctx, log, p, r); err != nil {
			return nil, err
		}
		log.Info("claim prepared", "devices", len(p.devices), "steps", p.steps.String())
	}
	return d.result(p, pds, ids), nil
}

// result is the kubelet's answer for the prepared claim: each device with
// its CDI device ID (when it has one) and, with device metadata on, its
// metadata.
func (d *Driver) result(p *preparation, pds []*devicev1.PreparedDevice, ids map[string]string) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(p.devices))
	for i, dev := range p.devices {
		kd := kubeletplugin.Device{Requests: []string{dev.request}, PoolName: slicepool.SlicePool(d.node, dev.pool), DeviceName: dev.device}
		if dev.shareID != nil {
			id := types.UID(*dev.shareID)
			kd.ShareID = &id
		}
		if id := ids[dev.device]; id != "" {
			kd.CDIDeviceIDs = []string{id}
		}
		if d.metadata {
			kd.Metadata = deviceMetadata(pds[i], dev.config)
		}
		out = append(out, kd)
	}
	return out
}

// preparedInPlanOrder is the prepared device of each planned device, from
// rows that match the preparation (sameDevices).
func preparedInPlanOrder(p *preparation, rows []*statev1.Allocation) []*devicev1.PreparedDevice {
	byKey := map[string]*statev1.Allocation{}
	for _, row := range rows {
		byKey[rowKey(row)] = row
	}
	out := make([]*devicev1.PreparedDevice, len(p.devices))
	for i, dev := range p.devices {
		row := byKey[dev.key()]
		out[i] = row.GetPreparedDevice()
		if row.GetConfig() != nil {
			p.devices[i].config = row.GetConfig() // the one it was set up with
		}
	}
	return out
}

// writeSpec writes the claim's CDI spec for its prepared devices (in
// order) and returns their CDI device IDs by device name.
func (d *Driver) writeSpec(p *preparation, pds []*devicev1.PreparedDevice) (map[string]string, error) {
	if d.cdi == nil {
		return nil, nil
	}
	devs := make([]cdispec.Device, len(pds))
	for i, pd := range pds {
		devs[i] = cdispec.Device{Request: p.devices[i].request, Name: p.devices[i].device, Prepared: pd,
			IfName: podIfName(pd, p.devices[i].config)}
	}
	return d.cdi.Write(string(p.claim.UID), devs)
}

// reads is what a prepare reads before it changes anything.
type reads struct {
	claimRows []*statev1.Allocation // the claim's allocations
	// podRows are the pod's allocations, read under the pod's lock.
	podRows []*statev1.Allocation
	// inv is the claim's devices in the inventory, by name; a name the
	// inventory does not hold is missing.
	inv map[string]*devicev1.Device
}

// read makes the prepare's reads all at once, each a round trip that
// depends on no other: the pod's check (checkPod), the claim's and the
// pod's allocations and the claim's devices. A refused pod's error comes
// first, whatever the others: the claim is refused for its pod.
func (d *Driver) read(ctx context.Context, p *preparation) (*reads, error) {
	names := make([]string, len(p.devices))
	for i, dev := range p.devices {
		names[i] = dev.device
	}
	var r reads
	var podErr, claimErr, podRowsErr, invErr error
	var wg sync.WaitGroup
	wg.Go(func() { podErr = d.checkPod(ctx, p) })
	wg.Go(func() {
		r.claimRows, claimErr = d.listAllocations(ctx, &statev1.ListAllocationsRequest{ClaimUid: string(p.claim.UID)})
	})
	wg.Go(func() {
		r.podRows, podRowsErr = d.listAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: p.podUID})
	})
	wg.Go(func() { r.inv, invErr = d.inventory(ctx, names) })
	wg.Wait()
	if err := cmp.Or(podErr, claimErr, podRowsErr, invErr); err != nil {
		return nil, err
	}
	return &r, nil
}

// reuse settles what the state holds for the claim (rows) and returns
// its prepared rows when the claim is prepared as planned (then its status
// entries are rewritten where missing), else nil. Prepared rows that do
// not match the preparation are freed, so that the claim is prepared afresh.
func (d *Driver) reuse(ctx context.Context, log *slog.Logger, p *preparation, rows []*statev1.Allocation) ([]*statev1.Allocation, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	kept, err := d.settle(ctx, log, p, rows)
	if err != nil || len(kept) == 0 {
		return nil, err
	}
	for _, row := range kept {
		if row.GetPodUid() != p.podUID {
			return nil, fmt.Errorf("%w: device %s is prepared for pod UID %s, not %s of pod %s; the claim must be unprepared first",
				ErrClaimInUse, row.GetDeviceName(), row.GetPodUid(), p.podUID, p.podName)
		}
	}
	if !sameDevices(kept, p) {
		log.Warn("prepared devices differ from the allocation; freeing them and preparing again", "prepared", len(kept))
		for _, row := range kept {
			if err := d.releaseNow(ctx, log, row); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	log.Debug("claim is prepared already")
	if err := d.ensureStatus(ctx, p, kept); err != nil {
		return nil, err
	}
	return kept, nil
}

// settle resolves the claim's rows that a prepare cannot build on and
// returns the prepared ones: left-over intents are restored from the claim
// status or rolled back (settleIntent); rows still being freed from an
// earlier use are freed now, or the prepare fails.
func (d *Driver) settle(ctx context.Context, log *slog.Logger, p *preparation, rows []*statev1.Allocation) ([]*statev1.Allocation, error) {
	var kept []*statev1.Allocation
	for _, row := range rows {
		switch row.GetPhase() {
		case statev1.Phase_PHASE_PREPARING:
			restored, freeErr, err := d.settleIntent(ctx, log, row, p.claim)
			if err = stillFreeing(row, freeErr, err); err != nil {
				return nil, err
			}
			if restored != nil {
				kept = append(kept, restored)
			}
		case statev1.Phase_PHASE_FREEING_FAILED:
			if err := d.releaseNow(ctx, log, row); err != nil {
				return nil, err
			}
		default:
			kept = append(kept, row)
		}
	}
	return kept, nil
}

// releaseNow releases row, and fails when its device could not be freed.
func (d *Driver) releaseNow(ctx context.Context, log *slog.Logger, row *statev1.Allocation) error {
	freeErr, err := d.release(ctx, log, row)
	return stillFreeing(row, freeErr, err)
}

func stillFreeing(row *statev1.Allocation, freeErr, err error) error {
	if err == nil && freeErr != nil {
		err = fmt.Errorf("device %s: %w: %w", row.GetDeviceName(), ErrStillFreeing, freeErr)
	}
	return err
}

func sameDevices(rows []*statev1.Allocation, p *preparation) bool {
	if len(rows) != len(p.devices) {
		return false
	}
	want := map[string]bool{}
	for _, dev := range p.devices {
		want[dev.key()] = true
	}
	for _, row := range rows {
		if !want[rowKey(row)] {
			return false
		}
	}
	return true
}

// ensureStatus rewrites the claim's status entries from the prepared rows
// when one of them is missing.
func (d *Driver) ensureStatus(ctx context.Context, p *preparation, rows []*statev1.Allocation) error {
	byKey := map[string]*statev1.Allocation{}
	missing := false
	for _, row := range rows {
		byKey[rowKey(row)] = row
		if d.readyData(p.claim, row.GetPool(), row.GetDeviceName()) == nil {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	entries := make([]resourceapi.AllocatedDeviceStatus, 0, len(p.devices))
	for _, dev := range p.devices {
		row := byKey[dev.key()]
		e, err := d.readyEntry(p.claim, dev.deviceRef, row.GetPreparedDevice(), row.GetConfig())
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	if err := d.claims.UpdateDeviceStatus(ctx, p.claim, entries); err != nil {
		return fmt.Errorf("rewriting claim status: %w", err)
	}
	return nil
}

// prepareFresh records the intents, sets the devices up, writes the CDI
// spec and the claim status and commits; on failure it undoes all of it.
// It returns the prepared devices in the preparation's order and their CDI device IDs.
func (d *Driver) prepareFresh(ctx context.Context, log *slog.Logger, p *preparation, r *reads) ([]*devicev1.PreparedDevice, map[string]string, error) {
	inv := r.inv
	devs := make([]*devicev1.Device, len(p.devices))
	for i, dev := range p.devices {
		if devs[i] = inv[dev.device]; devs[i] == nil {
			return nil, nil, fmt.Errorf("device %s (request %q): %w", dev.device, dev.request, ErrUnknownDevice)
		}
	}
	if err := checkNamesInClaim(p, devs); err != nil {
		return nil, nil, err
	}
	if err := d.begin(ctx, p, devs, inv, r.podRows); err != nil {
		return nil, nil, err
	}
	p.steps.done("intents")
	return d.setUp(ctx, log, p, devs)
}

// ifName is the name a device will have in the pod: the config's podIfName,
// else its kernel name ("" for a device with no netdev).
func ifName(cfg *devicev1.DeviceConfig, dev *devicev1.Device) string {
	if n := cfg.GetPodIfName(); n != "" {
		return n
	}
	return dev.GetKernelIfName()
}

func checkNamesInClaim(p *preparation, devs []*devicev1.Device) error {
	names := map[string]string{}
	for i, dev := range p.devices {
		n := ifName(dev.config, devs[i])
		if n == "" {
			continue
		}
		if other, ok := names[n]; ok {
			return fmt.Errorf("%w: %q of request %q is also the name of request %q of this claim", ErrIfNameInUse, n, dev.request, other)
		}
		names[n] = dev.request
	}
	return nil
}

// begin checks the interface names against the pod's other claims (rows,
// the pod's allocations read under its lock) and records the intents,
// then lets the pod's lock go.
func (d *Driver) begin(ctx context.Context, p *preparation, devs []*devicev1.Device, inv map[string]*devicev1.Device, rows []*statev1.Allocation) error {
	defer p.unlockPod()
	taken, err := d.takenNames(ctx, p, rows, inv)
	if err != nil {
		return err
	}
	allocs, err := p.intentRows(devs, taken)
	if err != nil {
		return err
	}
	resp, err := d.intents.BeginPrepare(ctx, &statev1.BeginPrepareRequest{Allocations: allocs})
	if err != nil {
		return callErr("reserving devices", err)
	}
	return p.adoptIntents(resp.GetAllocations())
}

// takenNames are the interface names the pod's other claims' devices
// (rows, the pod's allocations) take, each with its allocation. The
// inventory, inv, tells the names of those not prepared yet: the ones it
// lacks are read from the provisioner and added to it.
func (d *Driver) takenNames(ctx context.Context, p *preparation, rows []*statev1.Allocation, inv map[string]*devicev1.Device) (map[string]*statev1.Allocation, error) {
	var missing []string
	for _, row := range rows {
		if row.GetClaimUid() != string(p.claim.UID) && row.GetPreparedDevice().GetDevice() == nil && inv[row.GetDeviceName()] == nil {
			missing = append(missing, row.GetDeviceName())
		}
	}
	if len(missing) > 0 {
		more, err := d.inventory(ctx, missing)
		if err != nil {
			return nil, err
		}
		maps.Copy(inv, more)
	}
	taken := map[string]*statev1.Allocation{}
	for _, row := range rows {
		if row.GetClaimUid() == string(p.claim.UID) {
			continue
		}
		if n := ifName(row.GetConfig(), rowDevice(row, inv)); n != "" {
			taken[n] = row
		}
	}
	return taken, nil
}

// intentRows are the claim's allocations to record, one per device (devs,
// in p.devices' order); an ErrIfNameInUse when a device's interface name
// is one taken (takenNames).
func (p *preparation) intentRows(devs []*devicev1.Device, taken map[string]*statev1.Allocation) ([]*statev1.Allocation, error) {
	allocs := make([]*statev1.Allocation, len(p.devices))
	for i, dev := range p.devices {
		n := ifName(dev.config, devs[i])
		if row, ok := taken[n]; ok {
			return nil, fmt.Errorf("%w: %q of request %q is also the name of device %s of claim %s/%s",
				ErrIfNameInUse, n, dev.request, row.GetDeviceName(), row.GetClaimNamespace(), row.GetClaimName())
		}
		allocs[i] = &statev1.Allocation{
			Pool: dev.pool, DeviceName: dev.device, Manager: devs[i].GetManager(),
			ClaimUid: string(p.claim.UID), ClaimNamespace: p.claim.Namespace, ClaimName: p.claim.Name,
			Request: dev.request, PodUid: p.podUID, Config: dev.config, ShareId: ptr.Deref(dev.shareID, ""),
		}
	}
	return allocs, nil
}

// adoptIntents takes the recorded intents' configs as the devices': the
// state service's config is the one in force, with the addresses and
// routes of the ip pools the config names. An ErrClaimInUse when a row is
// not preparing (another call changed it meanwhile).
func (p *preparation) adoptIntents(rows []*statev1.Allocation) error {
	rowOf := map[string]*statev1.Allocation{}
	for _, row := range rows {
		if row.GetPhase() != statev1.Phase_PHASE_PREPARING {
			return fmt.Errorf("%w: device %s became %s meanwhile", ErrClaimInUse, row.GetDeviceName(), row.GetPhase())
		}
		rowOf[rowKey(row)] = row
	}
	for i := range p.devices {
		if row := rowOf[p.devices[i].key()]; row.GetConfig() != nil {
			p.devices[i].config = row.GetConfig()
		}
	}
	return nil
}

// rowDevice is the device of an allocation as prepared, else as the
// inventory has it.
func rowDevice(row *statev1.Allocation, inv map[string]*devicev1.Device) *devicev1.Device {
	if dev := row.GetPreparedDevice().GetDevice(); dev != nil {
		return dev
	}
	return inv[row.GetDeviceName()]
}

// setUp sets every device up at once (setUpAll), then writes the CDI spec
// and commits the intents; the claim status is written after the prepare
// returned (writeStatusLater). Any failure before the commit rolls
// everything back. The spec is written before the commit: a committed
// claim always has its spec, and one a crash left uncommitted has its
// spec swept at recovery (syncSpecs). The status entries are made before
// the commit, so that status data that cannot be encoded fails the
// prepare; a claim whose status says Ready is committed, and one a crash
// left committed without its status gets it at recovery (fillStatus).
func (d *Driver) setUp(ctx context.Context, log *slog.Logger, p *preparation, devs []*devicev1.Device) ([]*devicev1.PreparedDevice, map[string]string, error) {
	rb, err := d.setUpAll(ctx, p, devs)
	if err != nil {
		return nil, nil, d.rollBack(ctx, log, rb, err)
	}
	p.steps.done("setup")
	rb.specWritten = d.cdi != nil
	ids, err := d.writeSpec(p, rb.prepared)
	if err != nil {
		return nil, nil, d.rollBack(ctx, log, rb, err)
	}
	p.steps.done("cdi")
	entries := make([]resourceapi.AllocatedDeviceStatus, len(p.devices))
	keys := make([]string, len(p.devices))
	commit := &statev1.CommitPrepareRequest{ClaimUid: string(p.claim.UID)}
	for i, dev := range p.devices {
		e, err := d.readyEntry(p.claim, dev.deviceRef, rb.prepared[i], dev.config)
		if err != nil {
			return nil, nil, d.rollBack(ctx, log, rb, err)
		}
		entries[i], keys[i] = e, dev.key()
		commit.Allocations = append(commit.Allocations, &statev1.PreparedAllocation{
			Key: dev.allocKey(), PreparedDevice: rb.prepared[i]})
	}
	if _, err := d.intents.CommitPrepare(ctx, commit); err != nil {
		return nil, nil, d.rollBack(ctx, log, rb, callErr("committing the allocations", err))
	}
	p.steps.done("commit")
	d.writeStatusLater(log, p.claim, keys, entries)
	return rb.prepared, ids, nil
}

// setUpAll runs setUpOne for every device of the claim at once and
// returns when all of them have. A claim of one device does not record
// its prepared device on its intent: the commit, right after, carries it
// (one fsynced write of the state service less on the kubelet's path),
// and the window in which a crash leaves an intent without it is the
// same: from Setup's change to the first durable record of its reply. One after the other, each Setup waited
// in the kernel (RTNL) behind the provisioner's background eBPF attach of
// the device set up before it, and a claim's prepare summed those waits.
// The error joins the failed devices' errors in the claim's order; rb
// says which devices are set up and whose outcome is unknown, whatever
// the subset. A failed Setup does not cancel the others: a Setup
// cancelled in flight has an unknown outcome, and only a dummy's can be
// undone without the prepared device its reply carries (guessPrepared).
// Each device's intent is recorded before (begin) and its prepared device
// right after its own Setup (setUpOne), so a crash leaves, device by
// device, what Recover settles: the order between devices never mattered
// to it.
func (d *Driver) setUpAll(ctx context.Context, p *preparation, devs []*devicev1.Device) (*rollback, error) {
	rb := &rollback{p: p, devs: devs, prepared: make([]*devicev1.PreparedDevice, len(p.devices)), uncertain: make([]bool, len(p.devices))}
	errs := fanout.Each(len(p.devices), func(i int) error {
		pd, err := d.setUpOne(ctx, p, devs[i], p.devices[i], len(p.devices) > 1)
		// Each call writes its own index only.
		rb.prepared[i] = pd
		rb.uncertain[i] = pd == nil && rpc.OutcomeUnknown(err)
		return err
	})
	return rb, errors.Join(errs...)
}

// setUpOne sets one device up and, with record, records its prepared
// device on its intent. pd is set when Setup succeeded (the recording may
// have failed); an error whose outcome is unknown with pd nil is a Setup
// whose reply was lost.
func (d *Driver) setUpOne(ctx context.Context, p *preparation, dev *devicev1.Device, pl plannedDevice, record bool) (*devicev1.PreparedDevice, error) {
	// The provisioner takes the device from its own inventory.
	resp, err := d.prov.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: dev.GetName(), Manager: dev.GetManager(),
		Config: pl.config, Pool: pl.pool, Share: pl.share()})
	if err == nil && resp.GetPreparedDevice() == nil {
		err = status.Error(codes.Internal, "the provisioner returned no prepared device")
	}
	if err != nil {
		return nil, fmt.Errorf("device %s (request %q): %w", pl.device, pl.request, callErr("setup", err))
	}
	pd := resp.GetPreparedDevice()
	if !record {
		return pd, nil
	}
	// Durable before anything else happens: a crash from here on is
	// rolled back with Free and this prepared device (Recover).
	if _, err := d.intents.RecordPrepared(ctx, &statev1.RecordPreparedRequest{ClaimUid: string(p.claim.UID),
		Allocations: []*statev1.PreparedAllocation{{Key: pl.allocKey(), PreparedDevice: pd}}}); err != nil {
		return pd, fmt.Errorf("device %s (request %q): %w", pl.device, pl.request, callErr("recording the prepared device", err))
	}
	return pd, nil
}

// allocKey is the state's key of row.
func allocKey(row *statev1.Allocation) *statev1.AllocationKey {
	return &statev1.AllocationKey{Pool: row.GetPool(), DeviceName: row.GetDeviceName(), ShareId: row.GetShareId()}
}

// inventory returns the node's devices of the given names (a name the
// inventory does not hold is missing from the map), by name.
func (d *Driver) inventory(ctx context.Context, names []string) (map[string]*devicev1.Device, error) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	inv := make(map[string]*devicev1.Device, len(names))
	for chunk := range slices.Chunk(names, maxListNames) {
		resp, err := d.devices.ListDevices(ctx, &statev1.ListDevicesRequest{Names: chunk})
		if err != nil {
			return nil, callErr("listing devices", err)
		}
		for _, dev := range resp.GetDevices() {
			inv[dev.GetName()] = dev
		}
	}
	return inv, nil
}

// maxListNames is the most names the state service's ListDevices takes
// at once.
const maxListNames = 128

func (d *Driver) listAllocations(ctx context.Context, req *statev1.ListAllocationsRequest) ([]*statev1.Allocation, error) {
	resp, err := d.allocs.ListAllocations(ctx, req)
	if err != nil {
		return nil, callErr("listing allocations", err)
	}
	return resp.GetAllocations(), nil
}

// podIfName is the name a prepared device's interface has in the pod: the
// claim's podIfName, else its kernel name; "" for a device without one (a
// vfio VF).
func podIfName(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) string {
	if pd.GetDevice().GetKernelIfName() == "" {
		return ""
	}
	return cmp.Or(cfg.GetPodIfName(), pd.GetDevice().GetKernelIfName())
}
