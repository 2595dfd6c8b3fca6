// Package plugin is netdra's NRI plugin: it puts a pod's prepared devices
// into the pod's network namespace when the runtime starts the sandbox, and
// takes them out when it stops. It fails closed: when a device cannot be
// attached, RunPodSandbox returns the reason, the devices attached earlier
// in the same call are detached again, and the sandbox fails, so a pod
// never runs without its devices. The hooks call only the state service
// and the provisioner, over local sockets: no API server, no slow work.
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// Plugin handles the pod sandbox events.
type Plugin struct {
	log         *slog.Logger
	state       statev1.StateServiceClient
	provisioner provisionerv1.ProvisionerServiceClient

	mu    sync.Mutex
	netns map[string]string // pod UID -> netns path, for stop events without one
	// reconciling serializes background reconciliations.
	reconciling sync.Mutex

	metrics *metrics
	conn    conn
}

// HookTimeout bounds the work of one hook, below the runtime's 2 s request
// timeout, so an unreachable state service or provisioner fails the sandbox
// with a clear error rather than a runtime timeout.
const HookTimeout = 1500 * time.Millisecond

// New returns the plugin. Its metrics are registered with reg when it is
// not nil.
func New(log *slog.Logger, state statev1.StateServiceClient, provisioner provisionerv1.ProvisionerServiceClient, reg prometheus.Registerer) *Plugin {
	return &Plugin{log: log, state: state, provisioner: provisioner, netns: map[string]string{}, metrics: newMetrics(reg)}
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
// detached.
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

// RunPodSandbox attaches the pod's prepared devices into its netns. A
// host-network pod is skipped. A device whose link is missing (the node
// rebooted since prepare) is set up again first. Any failure detaches what
// this call attached and fails the sandbox.
func (p *Plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) (err error) {
	defer func(start time.Time) { p.metrics.observe("RunPodSandbox", start, err) }(time.Now())
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	log := p.log.With("pod", pod.GetNamespace()+"/"+pod.GetName(), "uid", pod.GetUid())
	netns := netnsOf(pod)
	if netns == "" {
		log.Debug("Host-network pod: no devices attached")
		return nil
	}
	p.mu.Lock()
	p.netns[pod.GetUid()] = netns
	p.mu.Unlock()
	allocs, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: pod.GetUid()})
	if err != nil {
		return fmt.Errorf("netdra: listing the devices of pod %s: %w", pod.GetUid(), err)
	}
	var done []*statev1.Allocation
	for _, a := range allocs.GetAllocations() {
		if err := p.attach(ctx, a, pod.GetUid(), netns); err != nil {
			p.rollback(context.WithoutCancel(ctx), log, done, netns)
			return fmt.Errorf("netdra: device %s (claim %s/%s) for pod %s: %w",
				a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName(), pod.GetUid(), err)
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
	_, err := p.provisioner.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
	if status.Code(err) == codes.NotFound {
		// The link is gone (a node reboot): set the device up again.
		pd, err = p.setupAgain(ctx, a)
		if err == nil {
			_, err = p.provisioner.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
		}
	}
	if err != nil {
		return err
	}
	_, err = p.state.MarkAttached(ctx, &statev1.MarkAttachedRequest{
		Key:    &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName()},
		PodUid: podUID, NetnsPath: netns, PreparedDevice: pd})
	if err != nil {
		_, derr := p.provisioner.Detach(context.WithoutCancel(ctx), &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()})
		return errors.Join(fmt.Errorf("recording the attach: %w", err), derr)
	}
	return nil
}

func (p *Plugin) setupAgain(ctx context.Context, a *statev1.Allocation) (*devicev1.PreparedDevice, error) {
	resp, err := p.provisioner.Setup(ctx, &provisionerv1.SetupRequest{Device: a.GetPreparedDevice().GetDevice(), Config: a.GetConfig()})
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
	if _, err := p.provisioner.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: netns, Config: a.GetConfig()}); err != nil {
		return err
	}
	_, err = p.state.MarkDetached(ctx, &statev1.MarkDetachedRequest{Key: &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName()}})
	if status.Code(err) == codes.NotFound {
		return nil // unprepared meanwhile
	}
	return err
}

// StopPodSandbox detaches the pod's devices back into the host netns. When
// the event carries no netns, the one cached at RunPodSandbox or
// Synchronize is used; a vanished netns is success.
func (p *Plugin) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) (err error) {
	defer func(start time.Time) { p.metrics.observe("StopPodSandbox", start, err) }(time.Now())
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	netns := netnsOf(pod)
	p.mu.Lock()
	if netns == "" {
		netns = p.netns[pod.GetUid()]
	}
	p.mu.Unlock()
	allocs, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: pod.GetUid(), Phase: statev1.Phase_PHASE_ATTACHED})
	if err != nil {
		return fmt.Errorf("netdra: listing the devices of pod %s: %w", pod.GetUid(), err)
	}
	var errs []error
	for _, a := range allocs.GetAllocations() {
		ns := netns
		if ns == "" {
			ns = a.GetNetnsPath()
		}
		if err := p.detach(ctx, a, ns); err != nil {
			errs = append(errs, fmt.Errorf("netdra: detaching %s from pod %s: %w", a.GetDeviceName(), pod.GetUid(), err))
			continue
		}
		p.log.Info("Detached", "device", a.GetDeviceName(), "uid", pod.GetUid())
	}
	return errors.Join(errs...)
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
// has (as of the last Synchronize and the events since).
func (p *Plugin) Reconcile(ctx context.Context) {
	p.reconciling.Lock()
	defer p.reconciling.Unlock()
	allocs, err := p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{Phase: statev1.Phase_PHASE_ATTACHED})
	if err != nil {
		p.log.Warn("Reconciling attached devices", "error", err)
		return
	}
	for _, a := range allocs.GetAllocations() {
		p.mu.Lock()
		_, live := p.netns[a.GetPodUid()]
		p.mu.Unlock()
		if live {
			continue
		}
		if err := p.detach(ctx, a, a.GetNetnsPath()); err != nil {
			p.log.Warn("Detaching a device of a pod that is gone", "device", a.GetDeviceName(), "uid", a.GetPodUid(), "error", err)
			continue
		}
		p.log.Info("Detached a device of a pod that is gone", "device", a.GetDeviceName(), "uid", a.GetPodUid())
	}
}
