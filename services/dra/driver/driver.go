// Package driver is the prepare/unprepare core of the dra process: it
// implements the kubelet's DRA plugin interface
// (k8s.io/dynamic-resource-allocation/kubeletplugin.DRAPlugin) on top of the
// state service (durable intents and allocations) and the provisioner (the
// only process that touches the node).
//
// Prepare of a claim, for the results of this driver only: a preparation is made
// and checked first (exactly one pod reserves the claim, the pod is not on
// the host network, the opaque config parses strictly, interface names are
// unique in the pod), with nothing touched. Then state.BeginPrepare records
// durable intents for all the claim's devices at once, the provisioner sets
// each device up and state.RecordPrepared stores its prepared device on its
// intent right away (for a claim of one device, the commit carries it), and
// state.CommitPrepare turns the intents into allocations. Any failure frees
// what was set up (in reverse), aborts the intents and records a
// PrepareFailed event on the claim, so nothing on the node stays changed.
// The claim status gets one Ready entry per device (with the serialized
// prepared device, see [StatusData]) after the prepare returned: the
// kubelet does not wait for that write. Prepare is idempotent: a claim with
// prepared allocations is answered from them.
//
// Unprepare frees each device of the claim and deletes its allocation. A
// failed Free leaves the allocation FREEING_FAILED; [Driver.Run] retries it
// with backoff until it succeeds, whether or not the claim still exists.
//
// [Driver.Recover] reconciles the state with the claims after a restart. A
// prepare that a crash interrupted leaves an intent (PREPARING): it is
// completed from the claim status when the status was written, else rolled
// back (a status written before the commit is an earlier release's); a
// committed claim whose status was not written yet gets it from its
// allocations. Each device's prepared device is recorded on its intent
// (state.RecordPrepared, or the commit for a claim of one device) right
// after Setup returns, so the rollback frees
// it exactly, whatever its manager. Only a Setup whose reply was lost (the
// crash came while the provisioner worked) leaves no prepared device: a
// dummy device is then freed with one guessed from the inventory (a
// dummy's Setup changes nothing on the node), while what such a Setup
// changed on an SR-IOV VF cannot be known. What a restart reads back from
// a claim status is checked before it is trusted (the claim's pod, the
// provisioner's Restore against its inventory, the pool): status data
// that fails is not restored and its device not touched.
package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/keylock"
)

// DeviceLister reads the node's device inventory as the state service
// holds it (what the provisioner reported).
type DeviceLister interface {
	ListDevices(ctx context.Context, in *statev1.ListDevicesRequest, opts ...grpc.CallOption) (*statev1.ListDevicesResponse, error)
}

// Intents records a prepare durably before the node changes and ends it
// after, one claim at a time: BeginPrepare records an intent per device
// (refusing a device another claim holds), RecordPrepared stores a
// device's prepared device on its intent right after Setup, CommitPrepare
// turns the intents into allocations and AbortPrepare deletes them
// (FailedPrecondition when they were committed already).
type Intents interface {
	BeginPrepare(ctx context.Context, in *statev1.BeginPrepareRequest, opts ...grpc.CallOption) (*statev1.BeginPrepareResponse, error)
	RecordPrepared(ctx context.Context, in *statev1.RecordPreparedRequest, opts ...grpc.CallOption) (*statev1.RecordPreparedResponse, error)
	CommitPrepare(ctx context.Context, in *statev1.CommitPrepareRequest, opts ...grpc.CallOption) (*statev1.CommitPrepareResponse, error)
	AbortPrepare(ctx context.Context, in *statev1.AbortPrepareRequest, opts ...grpc.CallOption) (*statev1.AbortPrepareResponse, error)
}

// Allocations reads and ends the node's allocations: ListAllocations
// filters them, RestoreAllocations writes back the ones a restart lost
// (from the claim status), MarkFreeFailed keeps one whose Free failed for
// a retry and DeleteAllocation removes one after its Free.
type Allocations interface {
	ListAllocations(ctx context.Context, in *statev1.ListAllocationsRequest, opts ...grpc.CallOption) (*statev1.ListAllocationsResponse, error)
	RestoreAllocations(ctx context.Context, in *statev1.RestoreAllocationsRequest, opts ...grpc.CallOption) (*statev1.RestoreAllocationsResponse, error)
	MarkFreeFailed(ctx context.Context, in *statev1.MarkFreeFailedRequest, opts ...grpc.CallOption) (*statev1.MarkFreeFailedResponse, error)
	DeleteAllocation(ctx context.Context, in *statev1.DeleteAllocationRequest, opts ...grpc.CallOption) (*statev1.DeleteAllocationResponse, error)
}

// StateClient is the state service as the driver uses it, by use; each
// part of the driver holds only the piece it calls.
// statev1.StateServiceClient satisfies it.
type StateClient interface {
	DeviceLister
	Intents
	Allocations
}

// ProvisionerClient is the part of the provisioner the driver uses;
// provisionerv1.ProvisionerServiceClient satisfies it.
type ProvisionerClient interface {
	Setup(ctx context.Context, in *provisionerv1.SetupRequest, opts ...grpc.CallOption) (*provisionerv1.SetupResponse, error)
	Free(ctx context.Context, in *provisionerv1.FreeRequest, opts ...grpc.CallOption) (*provisionerv1.FreeResponse, error)
	Restore(ctx context.Context, in *provisionerv1.RestoreRequest, opts ...grpc.CallOption) (*provisionerv1.RestoreResponse, error)
}

var (
	_ StateClient       = statev1.StateServiceClient(nil)
	_ ProvisionerClient = provisionerv1.ProvisionerServiceClient(nil)
)

// ClaimWriter writes to ResourceClaims in the cluster.
type ClaimWriter interface {
	// UpdateDeviceStatus writes these devices' entries in
	// claim.status.devices (matched by driver, pool, device and share ID),
	// replacing an existing entry and keeping every other entry, other
	// drivers' included. Idempotent. An error means the status may not
	// have been written.
	UpdateDeviceStatus(ctx context.Context, claim *resourceapi.ResourceClaim, devices []resourceapi.AllocatedDeviceStatus) error
	// Event records an event on the claim (eventType is Normal or
	// Warning). Best effort: it does not fail.
	Event(claim *resourceapi.ResourceClaim, eventType, reason, message string)
}

// PodLookup returns the pod named by a claim's reservedFor entry. It is
// used to refuse pods on the host network, which have no network namespace
// of their own to put a device in.
type PodLookup func(ctx context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error)

// HealthSource reports device health to the kubelet, with the contract of
// kubeletplugin.DRAPlugin.WatchHealthStatus.
type HealthSource interface {
	WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error
}

// Config configures a Driver.
type Config struct {
	// DriverName is the DRA driver name (netdra.io): only allocation
	// results and opaque configs of this driver are handled. Required.
	DriverName string
	// NodeName is the node this driver runs on, for logs. Required.
	NodeName    string
	State       StateClient
	Provisioner ProvisionerClient
	// Claims writes claim status and records events. Required.
	Claims ClaimWriter
	// PodLookup, when set, is asked for the claim's pod so that a
	// host-network pod is refused. Without it the check is skipped.
	PodLookup PodLookup
	// Health, when set, serves WatchHealthStatus (dra sets package
	// health's watcher); without it the driver answers
	// kubeletplugin.ErrHealthNotSupported.
	Health HealthSource
	// Pools are the node's pools (the NodeConfig's): a device is restored
	// from a claim status (Recover) only into a pool whose filter selects
	// it. Without pools nothing is restored.
	Pools []publish.Spec
	// Logger defaults to a logger that discards.
	Logger *slog.Logger
	// RetryBase and RetryMax bound the backoff between retries of a failed
	// Free: RetryBase doubled per failed attempt, at most RetryMax.
	// Defaults: 1s and 5m.
	RetryBase, RetryMax time.Duration
	// OnFatalError, when set, is called by HandleError for an error that
	// is not kubeletplugin.ErrRecoverable; the process should stop.
	OnFatalError func(error)
	// CDI, when set, is the CDI spec directory the claims' specs are
	// written to (see package cdispec): a prepared device that needs one
	// (a PCI function, a device with device nodes) gets its CDI device
	// ID in the prepare result. Without it no spec is written.
	CDI *cdispec.Dir
	// DeviceMetadata adds each device's metadata (KEP-5304: its
	// attributes and network data) to the prepare result, for the
	// kubelet plugin helper to write when its device metadata is enabled.
	DeviceMetadata bool
	// RideOut is how long a prepare that failed with codes.Unavailable
	// (the state service or the provisioner restarting) is tried again
	// before its error goes to the kubelet; 0: not at all.
	RideOut time.Duration
	// OnDeviceLost, when set, is called for each device Free reports lost
	// (a metric); the driver logs it and records an event on its claim.
	OnDeviceLost func()
}

// Defaults of Config.
const (
	DefaultRetryBase = time.Second
	DefaultRetryMax  = 5 * time.Minute
)

// cleanupTimeout bounds the calls that undo a failed prepare; they run even
// when the kubelet's context has ended.
const cleanupTimeout = 30 * time.Second

// Driver prepares and unprepares this driver's devices of ResourceClaims.
// It is safe for concurrent use: claims are prepared concurrently, one
// prepare or unprepare per claim at a time.
type Driver struct {
	name        string
	node        string
	devices     DeviceLister
	intents     Intents
	allocs      Allocations
	prov        ProvisionerClient
	claims      ClaimWriter
	onLost      func()
	podLookup   PodLookup
	health      HealthSource
	pools       []publish.Spec
	log         *slog.Logger
	retryBase   time.Duration
	retryMax    time.Duration
	onFatal     func(error)
	cdi         *cdispec.Dir
	metadata    bool
	claimLocks  keylock.Set // one prepare/unprepare/retry per claim UID
	podLocks    keylock.Set // interface-name check + BeginPrepare per pod UID
	retries     retrySchedule
	kick        chan struct{}
	now         func() time.Time
	cleanupTime time.Duration
	rideOut     time.Duration
	// statusWrites are the claim status writes after prepares
	// (writeStatusLater) under way.
	statusWrites sync.WaitGroup
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New checks cfg and returns a Driver.
func New(cfg Config) (*Driver, error) {
	var missing []string
	for name, unset := range map[string]bool{
		"DriverName": cfg.DriverName == "", "NodeName": cfg.NodeName == "",
		"State": cfg.State == nil, "Provisioner": cfg.Provisioner == nil, "Claims": cfg.Claims == nil,
	} {
		if unset {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("driver config: %v required", sorted(missing))
	}
	d := &Driver{
		name: cfg.DriverName, node: cfg.NodeName, prov: cfg.Provisioner, claims: cfg.Claims, onLost: cfg.OnDeviceLost,
		devices: cfg.State, intents: cfg.State, allocs: cfg.State,
		podLookup: cfg.PodLookup, health: cfg.Health, pools: cfg.Pools, log: cfg.Logger,
		retryBase: cfg.RetryBase, retryMax: cfg.RetryMax, onFatal: cfg.OnFatalError,
		cdi: cfg.CDI, metadata: cfg.DeviceMetadata, rideOut: cfg.RideOut,
		retries: retrySchedule{due: map[string]time.Time{}},
		kick:    make(chan struct{}, 1), now: time.Now, cleanupTime: cleanupTimeout,
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("driver", d.name, "node", d.node)
	if d.retryBase <= 0 {
		d.retryBase = DefaultRetryBase
	}
	if d.retryMax <= 0 {
		d.retryMax = DefaultRetryMax
	}
	if d.retryMax < d.retryBase {
		return nil, fmt.Errorf("driver config: RetryMax %v is below RetryBase %v", d.retryMax, d.retryBase)
	}
	return d, nil
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. Every claim gets
// a result; a claim's failure is in its result's Err (and in a
// PrepareFailed event on the claim), never in the returned error.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, claim := range claims {
		if claim == nil {
			continue
		}
		wg.Go(func() {
			devices, err := d.prepareRidingOut(ctx, claim)
			if err != nil {
				d.claims.Event(claim, corev1.EventTypeWarning, ReasonPrepareFailed, err.Error())
			}
			mu.Lock()
			defer mu.Unlock()
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devices}
		})
	}
	wg.Wait()
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. A claim's
// result is nil once each of its devices is freed, or, when Free failed, is
// recorded FREEING_FAILED for Run to retry: the claim may be gone, and the
// driver, not the kubelet, owns the retry. It is an error only when the
// state service could not be read or updated; the kubelet then retries.
// An unknown claim is nil.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			err := d.unprepareClaim(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			out[c.UID] = err
		})
	}
	wg.Wait()
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: it logs errors of the
// helper's background work and calls Config.OnFatalError for one that is
// not recoverable.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	recoverable := errors.Is(err, kubeletplugin.ErrRecoverable)
	d.log.ErrorContext(ctx, msg, "error", err, "recoverable", recoverable)
	if !recoverable && d.onFatal != nil {
		d.onFatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin through
// Config.Health; without one it returns kubeletplugin.ErrHealthNotSupported
// at once, as the interface asks.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if d.health == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	return d.health.WatchHealthStatus(ctx, reports)
}

// cleanupContext returns a context for undoing work: not cancelled with
// ctx, bounded by the cleanup timeout.
func (d *Driver) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d.cleanupTime)
}
