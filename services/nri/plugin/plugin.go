// Package plugin is netdra's NRI plugin: it puts a pod's prepared devices
// into the pod's network namespace when the runtime starts the sandbox, and
// takes them out when it stops. The runtime holds one lock across every
// hook of every pod, so RunPodSandbox and StopPodSandbox only start the
// work and return (work.go). It fails closed at CreateContainer: a
// container starts only once every prepared device of its pod is in the
// pod's netns; when an attach fails, the devices attached in it are
// detached again and the pod's containers are refused with the reason, so
// a pod never runs without its devices. The plugin calls only the state
// service and the provisioner, over local sockets: no API server.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
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
	// MarkDetached records a device as back in the host; NotFound when the
	// allocation is gone.
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

	mu    sync.Mutex
	netns map[string]string // pod UID -> netns path of a running sandbox
	// attaching and detaching are the pods' background work (work.go), by
	// pod UID; bg counts it.
	attaching, detaching map[string]*podWork
	bg                   sync.WaitGroup
	// pods serializes the work on one pod: its hooks and what a
	// reconciliation does to its devices.
	pods keylock.Set
	// reconciling serializes background reconciliations.
	reconciling sync.Mutex

	metrics *metrics
	conn    conn
}

// HookTimeout bounds the wait of one hook (CreateContainer's for the pod's
// attach), below the runtime's 2 s request timeout, so an attach that has
// not ended refuses the container with a clear error rather than a
// runtime timeout.
const HookTimeout = 1500 * time.Millisecond

// rollbackTimeout bounds the detach of what a failed attach had attached.
const rollbackTimeout = 5 * time.Second

// New returns the plugin. Its metrics are registered with reg when it is
// not nil.
func New(log *slog.Logger, state StateClient, provisioner ProvisionerClient, reg prometheus.Registerer) *Plugin {
	return &Plugin{log: log, state: state, provisioner: provisioner, netns: map[string]string{},
		attaching: map[string]*podWork{}, detaching: map[string]*podWork{}, metrics: newMetrics(reg)}
}

// lockPod takes the pod's lock and returns its unlock. It waits as long as
// the lock is held, whatever the hook's deadline.
func (p *Plugin) lockPod(uid string) (unlock func()) {
	unlock, _ = p.pods.Lock(context.Background(), uid) // never fails: Background never ends
	return unlock
}

// netnsOf is the pod's network namespace path; empty for a host-network pod.
func netnsOf(pod *api.PodSandbox) string {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}

// Synchronize learns the network namespaces of the pods that exist, then
// reconciles in the background: devices attached to pods that are gone are
// detached, and the prepared devices of pods that run without them (their
// sandbox started while this plugin was not connected) are attached.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.metrics.observe("Synchronize", time.Now(), nil)
	p.conn.connected.Store(true)
	p.conn.connections.Add(1)
	live := map[string]string{}
	for _, pod := range pods {
		if ns := netnsOf(pod); ns != "" {
			live[pod.GetUid()] = ns
		}
	}
	p.mu.Lock()
	p.netns = live
	p.mu.Unlock()
	p.log.Info("Synchronized", "pods", len(pods))
	go p.Reconcile(context.WithoutCancel(ctx))
	return nil, nil
}

// RunPodSandbox starts the attach of the pod's prepared devices into its
// netns and returns: the runtime holds its NRI lock across the hook, and
// the moves take the kernel several milliseconds a device (work.go).
// CreateContainer waits for the attach and refuses the pod's containers
// when it failed. A host-network pod is skipped.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.metrics.observe("RunPodSandbox", time.Now(), nil)
	netns := netnsOf(pod)
	if netns == "" {
		p.log.Debug("Host-network pod: no devices attached", "uid", pod.GetUid())
		return nil
	}
	p.attachWork(p.podLog(pod), pod.GetUid(), netns)
	return nil
}

func (p *Plugin) podLog(pod *api.PodSandbox) *slog.Logger {
	return p.log.With("pod", pod.GetNamespace()+"/"+pod.GetName(), "uid", pod.GetUid())
}

// errSandboxStopped is an attach's outcome when the pod's sandbox stopped
// before the attach could start.
var errSandboxStopped = errors.New("the pod's sandbox stopped")

// attachPod attaches the pod's prepared devices into netns, under the
// pod's lock. A device attached to netns already is left alone; one whose
// link is missing (the node rebooted since prepare) is set up again first.
// Any failure detaches what this call attached and is returned.
func (p *Plugin) attachPod(ctx context.Context, log *slog.Logger, w *podWork, uid string) error {
	netns := w.netns
	w.at("waiting for the pod's lock")
	unlock := p.lockPod(uid)
	defer unlock()
	if ns, live := p.netnsOfLive(uid); !live || ns != netns {
		return errSandboxStopped
	}
	w.at("listing the pod's devices")
	allocs, err := retry(ctx, func(ctx context.Context) (*statev1.ListAllocationsResponse, error) {
		return p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: uid})
	})
	if err != nil {
		return fmt.Errorf("listing the devices of pod %s: %w", uid, err)
	}
	var done []*statev1.Allocation
	for _, a := range allocs.GetAllocations() {
		if a.GetPhase() == statev1.Phase_PHASE_ATTACHED && a.GetNetnsPath() == netns {
			continue
		}
		w.at("attaching device %s (claim %s/%s)", a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName())
		if err := p.attach(ctx, a, uid, netns); err != nil {
			if rpc.OutcomeUnknown(err) {
				// The provisioner may have moved it before the
				// call broke: detach it too (Detach is idempotent).
				done = append(done, a)
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			p.rollback(rctx, log, done, netns)
			cancel()
			return fmt.Errorf("device %s (claim %s/%s) for pod %s: %w",
				a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName(), uid, err)
		}
		done = append(done, a)
		log.Info("Attached", "device", a.GetDeviceName(), "podIfName", a.GetConfig().GetPodIfName(), "netns", netns)
	}
	return nil
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
	_, err := retry(ctx, attach)
	if status.Code(err) == codes.NotFound {
		// The link is gone (a node reboot): set the device up again.
		pd, err = p.setupAgain(ctx, a)
		if err == nil {
			_, err = retry(ctx, attach)
		}
	}
	if err != nil {
		return err
	}
	_, err = retry(ctx, func(ctx context.Context) (*statev1.MarkAttachedResponse, error) {
		return p.state.MarkAttached(ctx, &statev1.MarkAttachedRequest{
			Key:    &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName(), ShareId: a.GetShareId()},
			PodUid: podUID, NetnsPath: netns, PreparedDevice: pd})
	})
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_, derr := retry(dctx, func(ctx context.Context) (*provisionerv1.DetachResponse, error) {
			return p.provisioner.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
		})
		return errors.Join(fmt.Errorf("recording the attach: %w", err), derr)
	}
	return nil
}

// setupAgain sets a's device up again, in its pool, as dra did at prepare.
func (p *Plugin) setupAgain(ctx context.Context, a *statev1.Allocation) (*devicev1.PreparedDevice, error) {
	resp, err := p.provisioner.Setup(ctx, &provisionerv1.SetupRequest{Device: a.GetPreparedDevice().GetDevice(), Config: a.GetConfig(), Pool: a.GetPool(),
		Share: a.GetPreparedDevice().GetDevice().GetShare()})
	if err != nil {
		return nil, fmt.Errorf("setting the missing device up again: %w", err)
	}
	return resp.GetPreparedDevice(), nil
}

// rollback detaches the devices a failed RunPodSandbox had attached.
func (p *Plugin) rollback(ctx context.Context, log *slog.Logger, done []*statev1.Allocation, netns string) {
	for i := len(done) - 1; i >= 0; i-- {
		if err := p.detach(ctx, done[i], netns); err != nil {
			log.Error("Rolling back an attach", "device", done[i].GetDeviceName(), "error", err)
		}
	}
}

func (p *Plugin) detach(ctx context.Context, a *statev1.Allocation, netns string) error {
	// Re-read the row: Attach may have replaced the prepared device.
	pd := a.GetPreparedDevice()
	rows, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{DeviceName: a.GetDeviceName(), ClaimUid: a.GetClaimUid()})
	if err == nil && len(rows.GetAllocations()) == 1 {
		pd = rows.GetAllocations()[0].GetPreparedDevice()
	}
	resp, err := retry(ctx, func(ctx context.Context) (*provisionerv1.DetachResponse, error) {
		return p.provisioner.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
	})
	if err != nil {
		return err
	}
	if resp.GetDeviceLost() {
		p.metrics.lost.Inc()
		p.log.Error("Device lost: its pod's netns was gone before the Detach, and its link with it",
			"device", a.GetDeviceName(), "pool", a.GetPool(), "claim", a.GetClaimNamespace()+"/"+a.GetClaimName())
	}
	_, err = retry(ctx, func(ctx context.Context) (*statev1.MarkDetachedResponse, error) {
		return p.state.MarkDetached(ctx, &statev1.MarkDetachedRequest{Key: &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName(), ShareId: a.GetShareId()}})
	})
	if status.Code(err) == codes.NotFound {
		return nil // unprepared meanwhile
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

// detachPod detaches the pod's devices attached to netns (to any netns
// when it is empty), under the pod's lock. Devices attached to another
// netns belong to a newer sandbox of the pod and are left alone.
func (p *Plugin) detachPod(ctx context.Context, log *slog.Logger, uid, netns string) error {
	unlock := p.lockPod(uid)
	defer unlock()
	allocs, err := retry(ctx, func(ctx context.Context) (*statev1.ListAllocationsResponse, error) {
		return p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: uid, Phase: statev1.Phase_PHASE_ATTACHED})
	})
	if err != nil {
		return fmt.Errorf("listing the devices of pod %s: %w", uid, err)
	}
	var errs []error
	for _, a := range allocs.GetAllocations() {
		ns := netns
		switch {
		case ns == "":
			ns = a.GetNetnsPath()
		case a.GetNetnsPath() != "" && a.GetNetnsPath() != ns:
			continue
		}
		if err := p.detach(ctx, a, ns); err != nil {
			errs = append(errs, fmt.Errorf("detaching %s from pod %s: %w", a.GetDeviceName(), uid, err))
			continue
		}
		log.Info("Detached", "device", a.GetDeviceName())
	}
	return errors.Join(errs...)
}

// RemovePodSandbox forgets the pod and reconciles in the background.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	defer p.metrics.observe("RemovePodSandbox", time.Now(), nil)
	p.mu.Lock()
	delete(p.netns, pod.GetUid())
	delete(p.attaching, pod.GetUid())
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

// reconcileDetach detaches a device marked attached to a pod that is gone,
// under the pod's lock and after checking the row again: the pod's own
// background detach may have run meanwhile.
func (p *Plugin) reconcileDetach(ctx context.Context, a *statev1.Allocation) {
	if _, live := p.netnsOfLive(a.GetPodUid()); live {
		return
	}
	unlock := p.lockPod(a.GetPodUid())
	defer unlock()
	if _, live := p.netnsOfLive(a.GetPodUid()); live {
		return
	}
	rows, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{DeviceName: a.GetDeviceName(), ClaimUid: a.GetClaimUid()})
	if err != nil || len(rows.GetAllocations()) != 1 || rows.GetAllocations()[0].GetPhase() != statev1.Phase_PHASE_ATTACHED {
		return
	}
	a = rows.GetAllocations()[0]
	if err := p.detach(ctx, a, a.GetNetnsPath()); err != nil {
		p.log.Warn("Detaching a device of a pod that is gone", "device", a.GetDeviceName(), "uid", a.GetPodUid(), "error", err)
		return
	}
	p.log.Info("Detached a device of a pod that is gone", "device", a.GetDeviceName(), "uid", a.GetPodUid())
}

// reconcileAttach attaches the prepared devices of a device's pod when the
// pod's sandbox runs: it started while this plugin was away. It is the
// pod's attach work (attachWork: under the pod's lock, rolled back when it
// fails), unless the pod has one already.
func (p *Plugin) reconcileAttach(ctx context.Context, a *statev1.Allocation) {
	netns, live := p.netnsOfLive(a.GetPodUid())
	if !live || a.GetPodUid() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, workTimeout)
	defer cancel()
	log := p.log.With("uid", a.GetPodUid())
	if err := p.attachWork(log, a.GetPodUid(), netns).wait(ctx); err != nil {
		log.Error("Attaching the devices of a pod that runs without them", "device", a.GetDeviceName(), "error", err)
		return
	}
	log.Warn("Attached the devices of a pod that ran without them: its sandbox started while netdra's NRI plugin was not connected",
		"device", a.GetDeviceName(), "netns", netns)
}

// retry calls f again while it fails with Unavailable, until ctx ends: the
// server went away during the call (it restarts) and the connection waits
// for it to come back. Only idempotent calls are retried.
func retry[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		v, err := f(ctx)
		if status.Code(err) != codes.Unavailable {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
	}
}
