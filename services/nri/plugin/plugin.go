// Package plugin is netdra's NRI plugin: it puts a pod's prepared devices
// into the pod's network namespace when the runtime starts the sandbox, and
// takes them out when it stops. The sandbox hooks start that work and
// return, since the runtime holds one lock across every hook of every pod
// (work.go). It fails closed: when a device cannot be attached, the
// devices attached with it are detached again and the pod's containers are
// refused with the reason (gate.go), so a pod never runs without its
// devices. It calls only the state service and the provisioner, over
// local sockets: no API server.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fanout"
	"github.com/netdra/netdra/shared/keylock"
	"github.com/netdra/netdra/shared/rpc"
)

// StateClient is what the plugin asks of the state service: the
// allocations of a pod or a device, and their moves between the prepared
// and attached phases. Each call is idempotent, so the plugin retries it
// while the service is Unavailable.
type StateClient interface {
	// ListAllocations returns the allocations matching the request's
	// filters (pod, device, claim, phase).
	ListAllocations(ctx context.Context, in *statev1.ListAllocationsRequest, opts ...grpc.CallOption) (*statev1.ListAllocationsResponse, error)
	// MarkAttached records a device as attached to a pod's netns, with the
	// prepared device as it is now.
	MarkAttached(ctx context.Context, in *statev1.MarkAttachedRequest, opts ...grpc.CallOption) (*statev1.MarkAttachedResponse, error)
	// MarkAttachFailed records on a device's allocation that its attach
	// failed, and why, for dra to report on the claim; the next
	// MarkAttached clears it.
	MarkAttachFailed(ctx context.Context, in *statev1.MarkAttachFailedRequest, opts ...grpc.CallOption) (*statev1.MarkAttachFailedResponse, error)
	// MarkDetached records a device as back in the host; NotFound when the
	// allocation is gone, AlreadyExists when it is another pod's now.
	MarkDetached(ctx context.Context, in *statev1.MarkDetachedRequest, opts ...grpc.CallOption) (*statev1.MarkDetachedResponse, error)
}

// ProvisionerClient is what the plugin asks of the provisioner: putting a
// prepared device into a pod's netns and taking it out, and setting a
// device up again when its link is gone (a node reboot).
type ProvisionerClient interface {
	// Setup prepares a device again; the request names its pool.
	Setup(ctx context.Context, in *provisionerv1.SetupRequest, opts ...grpc.CallOption) (*provisionerv1.SetupResponse, error)
	// Attach puts the prepared device into the netns; idempotent. NotFound
	// when its link is missing.
	Attach(ctx context.Context, in *provisionerv1.AttachRequest, opts ...grpc.CallOption) (*provisionerv1.AttachResponse, error)
	// Detach takes it back to the host; idempotent, and a vanished netns
	// is success.
	Detach(ctx context.Context, in *provisionerv1.DetachRequest, opts ...grpc.CallOption) (*provisionerv1.DetachResponse, error)
}

var (
	_ StateClient       = statev1.StateServiceClient(nil)
	_ ProvisionerClient = provisionerv1.ProvisionerServiceClient(nil)
)

// Plugin handles the pod sandbox events.
type Plugin struct {
	log         *slog.Logger
	state       StateClient
	provisioner ProvisionerClient
	// waiting says which peers the plugin cannot reach (SetWaiting).
	waiting atomic.Pointer[func() []string]

	mu    sync.Mutex
	netns map[string]string // pod UID -> netns path of a running sandbox
	// attaching and detaching are the pods' background work (work.go),
	// by pod UID: the last attach started, and the detach running.
	attaching, detaching map[string]*podWork
	bg                   sync.WaitGroup
	// gate is the hook a container of a pod whose attach runs waits in
	// (gate.go); zero: CreateContainer waits itself.
	gate Gate
	// pods serializes the work on one pod: its hooks and what a
	// reconciliation does to its devices.
	pods keylock.Set
	// reconciling serializes background reconciliations.
	reconciling sync.Mutex

	// calls bounds the devices attached and detached at once across
	// the pods (MaxCalls).
	calls *fanout.Limit

	metrics *metrics
	conn    conn
}

// MaxCalls is how many devices the pods' background attaches and detaches
// attach or detach at once, across the node; the others wait, pod by pod in
// the order the pods came (fanout.Limit). It is well above the
// provisioner's own bound on moves (its server.MaxMoves), because a slot
// is also held across the state service's calls (MarkAttached,
// ListAllocations, MarkDetached), which wait on the disk, and the moves
// need devices queued behind them to keep the kernel busy. Without a bound,
// a burst of pods holds a goroutine and a gRPC stream in nri and in the
// provisioner for every device; bench/RESULTS.md measures the trade-off.
const MaxCalls = 64

// HookTimeout bounds the work of one hook, below the runtime's 2 s request
// timeout, so an unreachable state service or provisioner refuses the
// container with a clear error rather than a runtime timeout.
const HookTimeout = 1500 * time.Millisecond

// rollbackTimeout bounds the detach of what a failed attach attached.
const rollbackTimeout = 2 * time.Second

// New returns the plugin. Its metrics are registered with reg when it is
// not nil.
func New(log *slog.Logger, state StateClient, provisioner ProvisionerClient, reg prometheus.Registerer) *Plugin {
	p := &Plugin{log: log, state: state, provisioner: provisioner, netns: map[string]string{},
		attaching: map[string]*podWork{}, detaching: map[string]*podWork{}, calls: fanout.NewLimit(MaxCalls), metrics: newMetrics(reg)}
	if reg != nil {
		reg.MustRegister(p.conn.collectors()...)
	}
	return p
}

// lockPod takes the pod's lock and returns its unlock. It waits as long as
// the lock is held, whatever the hook's deadline.
func (p *Plugin) lockPod(uid string) (unlock func()) {
	unlock, _ = p.pods.Lock(context.Background(), uid) // never fails: Background never ends
	return unlock
}

// Synchronize learns the network namespaces of the pods that exist, then
// reconciles in the background: devices attached to pods that are gone are
// detached, and the prepared devices of pods that run without them (their
// sandbox started while this plugin was not connected) are attached.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.metrics.observe("Synchronize", time.Now(), nil)
	p.conn.setConnected(true)
	p.conn.connections.Add(1)
	live := map[string]string{}
	for _, pod := range pods {
		if ns := netnsOf(pod); ns != "" {
			live[pod.GetUid()] = ns
		}
	}
	p.mu.Lock()
	p.netns = live
	p.forgetGone()
	p.mu.Unlock()
	p.log.Info("Synchronized", "pods", len(pods))
	go p.Reconcile(context.WithoutCancel(ctx))
	return nil, nil
}

// RunPodSandbox starts the attach of the pod's prepared devices into its
// netns and returns (work.go): the runtime holds its NRI lock across the
// hook. A host-network pod is skipped. The pod's containers wait for the
// attach, and are refused when it fails (gate.go).
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.metrics.observe("RunPodSandbox", time.Now(), nil)
	netns := netnsOf(pod)
	if netns == "" {
		if undescribed(pod) {
			p.podLog(pod).Warn("The runtime describes the pod's sandbox without its namespaces: the containers of a pod with devices are refused", "reason", errUndescribed)
			return nil
		}
		p.log.Debug("Host-network pod: no devices attached", "uid", pod.GetUid())
		return nil
	}
	p.attachWork(p.podLog(pod), pod.GetUid(), netns)
	return nil
}

func (p *Plugin) podLog(pod *api.PodSandbox) *slog.Logger {
	return p.log.With("pod", pod.GetNamespace()+"/"+pod.GetName(), "uid", pod.GetUid())
}

func (p *Plugin) attach(ctx context.Context, a *statev1.Allocation, podUID, netns string) error {
	switch a.GetPhase() {
	case statev1.Phase_PHASE_PREPARED, statev1.Phase_PHASE_ATTACHED:
	default:
		return fmt.Errorf("allocation is %s, not prepared", a.GetPhase())
	}
	pd := a.GetPreparedDevice()
	attach := func(ctx context.Context) (*provisionerv1.AttachResponse, error) {
		return p.provisioner.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
	}
	_, err := attach(ctx)
	if status.Code(err) == codes.NotFound {
		// The link is gone (a node reboot): set the device up again.
		pd, err = p.setupAgain(ctx, a)
		if err == nil {
			_, err = attach(ctx)
		}
	}
	if err != nil {
		p.recordAttachFailure(ctx, a, err)
		return err
	}
	_, err = p.state.MarkAttached(ctx, &statev1.MarkAttachedRequest{
		Key:    &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName(), ShareId: a.GetShareId()},
		PodUid: podUID, NetnsPath: netns, PreparedDevice: pd})
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_, derr := p.provisioner.Detach(dctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
		return errors.Join(fmt.Errorf("recording the attach: %w", err), derr)
	}
	return nil
}

// recordTimeout bounds the record of a failed attach, which runs after
// the attach's own deadline may have passed.
const recordTimeout = time.Second

// recordAttachFailure records on a's row that its attach failed with err,
// so that dra reports it on the claim. An attach whose outcome is unknown
// (the call broke, the deadline passed) is not a refusal and is not
// recorded. Best effort: a record that fails is logged, and the attach's
// failure stands either way.
func (p *Plugin) recordAttachFailure(ctx context.Context, a *statev1.Allocation, err error) {
	if rpc.OutcomeUnknown(err) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	// Not retried by grpc (RetriedMethods): a record whose reply was lost
	// would count the failure twice.
	_, rerr := p.state.MarkAttachFailed(rctx, &statev1.MarkAttachFailedRequest{
		Key:   &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName(), ShareId: a.GetShareId()},
		Error: attachErrorText(err)})
	if rerr != nil {
		p.log.Warn("Recording a failed attach", "device", a.GetDeviceName(), "claim", a.GetClaimNamespace()+"/"+a.GetClaimName(), "error", rerr)
	}
}

// attachErrorText is err as the claim's owner reads it: a refused field
// (a BadRequest field violation) as "<field>: <reason>", the field named
// as the claim's parameters name it (the provisioner's "config." prefix
// dropped); another gRPC error's message without gRPC's "rpc error: code
// = ..." prefix.
func attachErrorText(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			v := br.GetFieldViolations()[0]
			return strings.TrimPrefix(v.GetField(), "config.") + ": " + v.GetDescription()
		}
	}
	return st.Message()
}

// setupAgain sets a's device up again, in its pool, as dra did at prepare.
func (p *Plugin) setupAgain(ctx context.Context, a *statev1.Allocation) (*devicev1.PreparedDevice, error) {
	dev := a.GetPreparedDevice().GetDevice()
	resp, err := p.provisioner.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: dev.GetName(), Manager: dev.GetManager(),
		Config: a.GetConfig(), Pool: a.GetPool(), Share: dev.GetShare()})
	if err != nil {
		return nil, fmt.Errorf("setting the missing device up again: %w", err)
	}
	return resp.GetPreparedDevice(), nil
}

// rollback detaches the devices a failed attach of a pod had attached.
func (p *Plugin) rollback(ctx context.Context, log *slog.Logger, done []*statev1.Allocation, netns string) {
	for i := len(done) - 1; i >= 0; i-- {
		if err := p.detach(ctx, done[i], netns); err != nil {
			log.Error("Rolling back an attach", "device", done[i].GetDeviceName(), "error", err)
		}
	}
}

// detach detaches a's device from netns, with its row read again first: a
// may be older than an Attach that replaced the prepared device (a
// rollback's row from before the attach, a reconciliation's list).
func (p *Plugin) detach(ctx context.Context, a *statev1.Allocation, netns string) error {
	rows, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{DeviceName: a.GetDeviceName(), ClaimUid: a.GetClaimUid()})
	if err == nil && len(rows.GetAllocations()) == 1 {
		a = rows.GetAllocations()[0]
	}
	return p.detachRow(ctx, a, netns)
}

// detachRow detaches a's device from netns, a being its current row (read
// under the pod's lock, which every attach and detach of the pod holds).
func (p *Plugin) detachRow(ctx context.Context, a *statev1.Allocation, netns string) error {
	pd := a.GetPreparedDevice()
	resp, err := p.provisioner.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
	if err != nil {
		return err
	}
	if resp.GetDeviceLost() {
		p.metrics.lost.Inc()
		p.log.Error("Device lost: its pod's netns was gone before the Detach, and its link with it",
			"device", a.GetDeviceName(), "pool", a.GetPool(), "claim", a.GetClaimNamespace()+"/"+a.GetClaimName())
	}
	_, err = p.state.MarkDetached(ctx, &statev1.MarkDetachedRequest{
		Key:    &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName(), ShareId: a.GetShareId()},
		PodUid: a.GetPodUid(),
	})
	switch status.Code(err) {
	case codes.NotFound: // unprepared meanwhile
		return nil
	case codes.AlreadyExists: // unprepared, then prepared and attached for another pod
		p.log.Info("Detach came after the device went to another pod: its row left as that pod's", "device", a.GetDeviceName(), "error", err)
		return nil
	}
	return err
}

// StopPodSandbox starts the detach of the pod's devices back into the
// host netns and returns (work.go): the provisioner holds a handle on the
// pod's netns from Attach to Detach, so the devices can be taken back
// after the runtime removed the netns. When the event carries no netns,
// the one cached at RunPodSandbox or Synchronize is used.
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.metrics.observe("StopPodSandbox", time.Now(), nil)
	netns := netnsOf(pod)
	p.mu.Lock()
	if netns == "" {
		netns = p.netns[pod.GetUid()]
	}
	// A stopped sandbox is no longer one to attach devices to.
	delete(p.netns, pod.GetUid())
	p.mu.Unlock()
	p.detachWork(p.podLog(pod), pod.GetUid(), netns)
	return nil
}

// RemovePodSandbox forgets the pod and reconciles in the background.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	defer p.metrics.observe("RemovePodSandbox", time.Now(), nil)
	p.mu.Lock()
	delete(p.netns, pod.GetUid())
	p.mu.Unlock()
	go p.Reconcile(context.WithoutCancel(ctx))
	return nil
}

// Reconcile detaches devices marked attached to pods the runtime no longer
// has (as of the last Synchronize and the events since), and attaches the
// prepared devices of the pods it has that run without them.
func (p *Plugin) Reconcile(ctx context.Context) {
	p.reconciling.Lock()
	defer p.reconciling.Unlock()
	allocs, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		p.log.Warn("Reconciling attached devices", "error", err)
		return
	}
	for _, a := range allocs.GetAllocations() {
		switch a.GetPhase() {
		case statev1.Phase_PHASE_ATTACHED:
			p.reconcileDetach(ctx, a)
		case statev1.Phase_PHASE_PREPARED:
			p.reconcileAttach(ctx, a)
		}
	}
}

// netnsOfLive is the netns of the pod's running sandbox, if it has one.
func (p *Plugin) netnsOfLive(podUID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns, ok := p.netns[podUID]
	return ns, ok
}

func (p *Plugin) reconcileDetach(ctx context.Context, a *statev1.Allocation) {
	if _, live := p.netnsOfLive(a.GetPodUid()); live || p.hasWork(a.GetPodUid()) {
		return
	}
	if err := p.detach(ctx, a, a.GetNetnsPath()); err != nil {
		p.log.Warn("Detaching a device of a pod that is gone", "device", a.GetDeviceName(), "uid", a.GetPodUid(), "error", err)
		return
	}
	p.log.Info("Detached a device of a pod that is gone", "device", a.GetDeviceName(), "uid", a.GetPodUid())
}

// reconcileAttach attaches a prepared device to its pod when the pod's
// sandbox runs: the sandbox started while this plugin was away. Under the
// pod's lock, so no hook of the pod runs meanwhile, and after checking the
// row again: a hook may have attached or detached it.
func (p *Plugin) reconcileAttach(ctx context.Context, a *statev1.Allocation) {
	if _, live := p.netnsOfLive(a.GetPodUid()); !live || a.GetPodUid() == "" || p.hasWork(a.GetPodUid()) {
		return
	}
	unlock := p.lockPod(a.GetPodUid())
	defer unlock()
	netns, live := p.netnsOfLive(a.GetPodUid())
	if !live {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	rows, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{DeviceName: a.GetDeviceName(), ClaimUid: a.GetClaimUid()})
	if err != nil || len(rows.GetAllocations()) != 1 || rows.GetAllocations()[0].GetPhase() != statev1.Phase_PHASE_PREPARED {
		return
	}
	a = rows.GetAllocations()[0]
	if err := p.attach(ctx, a, a.GetPodUid(), netns); err != nil {
		p.log.Error("Attaching a device of a pod that runs without it", "device", a.GetDeviceName(), "uid", a.GetPodUid(), "error", err)
		return
	}
	p.log.Warn("Attached a device of a pod that ran without it: its sandbox started while netdra's NRI plugin was not connected",
		"device", a.GetDeviceName(), "uid", a.GetPodUid(), "netns", netns)
}

// podAllocations returns the pod's allocations from the state service,
// only those in phase unless it is PHASE_UNSPECIFIED (a call grpc retries
// while the service is unavailable: RetriedMethods).
func (p *Plugin) podAllocations(ctx context.Context, uid string, phase statev1.Phase) ([]*statev1.Allocation, error) {
	resp, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: uid, Phase: phase})
	return resp.GetAllocations(), err
}

// RetriedMethods are the calls of the plugin that grpc tries again while
// they fail with Unavailable (rpc.RetryUnavailable on the connections the
// clients use): the server went away during the call (it restarts) and the
// connection waits for it to come back. Each is idempotent; Setup is not
// among them.
var RetriedMethods = []string{
	statev1.StateService_ListAllocations_FullMethodName,
	statev1.StateService_MarkAttached_FullMethodName,
	statev1.StateService_MarkDetached_FullMethodName,
	provisionerv1.ProvisionerService_Attach_FullMethodName,
	provisionerv1.ProvisionerService_Detach_FullMethodName,
}
