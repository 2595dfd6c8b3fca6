package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/shared/hookargs"
)

// Gate is where a container of a pod whose attach still runs waits for it
// outside the runtime's NRI lock: the OCI createRuntime hook `<Hook>
// wait-attached` (netdra-hook, package gatehook), which runc runs as it
// creates the container (after CreateContainer returned, holding no lock
// of the runtime's) and which asks the plugin's WaitAttached on Socket.
type Gate struct {
	// Hook is the netdra-hook binary's path on the host (the DaemonSet
	// installs it there with `nri install-hook`, for dra's netns check
	// hook too).
	Hook string
	// Socket is the plugin's gate socket, at the path the host sees.
	Socket string
}

// WithGate makes the plugin hand a container's wait for its pod's attach
// to g's hook (g.Hook and g.Socket set), instead of waiting in
// CreateContainer under the runtime's NRI lock.
func (p *Plugin) WithGate(g Gate) *Plugin {
	p.gate = g
	return p
}

// hook is the createRuntime hook that waits for the pod's attach.
func (g Gate) hook(uid, netns string) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	adj.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{{
		Path:    g.Hook,
		Args:    hookargs.WaitAttachedArgs(g.Hook, g.Socket, uid, netns),
		Timeout: &api.OptionalInt{Value: gatehook.HookTimeout},
	}}})
	return adj
}

// CreateContainer is the gate of fail-closed: no container of a pod starts
// unless every prepared device of the pod is in the pod's network
// namespace. The first container after the pod's attach ended with its
// devices all in place (or found none) costs no call; the others, and a
// pod without devices whose attach still runs, one local
// ListAllocations. Otherwise the pod's attach (RunPodSandbox's,
// or one started here when it failed, or when there is none: the sandbox
// started while this plugin was not connected, or before a claim was
// prepared) is waited for: in the container's gate hook when the plugin
// has one (WithGate), so that the wait holds no lock of the runtime's, or
// here, within the hook's time. A failed attach refuses the container
// with the reason, and the kubelet's next creation attaches again.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (_ *api.ContainerAdjustment, _ []*api.ContainerUpdate, err error) {
	defer func(start time.Time) { p.metrics.observe("CreateContainer", start, err) }(time.Now())
	netns := netnsOf(pod)
	if netns == "" && !undescribed(pod) {
		return nil, nil, nil // host network: nothing to attach
	}
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	refuse := func(err error) error {
		return fmt.Errorf("netdra: container %s of pod %s refused: %w", ctr.GetName(), pod.GetUid(), err)
	}
	if netns == "" {
		return nil, nil, p.refuseUndescribed(ctx, pod, refuse)
	}
	if p.freshAttach(pod.GetUid(), netns) {
		return nil, nil, nil // its attach has just put every device there
	}
	allocs, err := p.podAllocations(ctx, pod.GetUid(), statev1.Phase_PHASE_UNSPECIFIED)
	if err != nil {
		return nil, nil, refuse(fmt.Errorf("listing the devices of the pod: %w", err))
	}
	// While the pod's attach or detach runs, the rows say what was, not
	// what will be: wait for it, unless the pod has no device at all.
	if len(allocs) == 0 || !p.hasWork(pod.GetUid()) && len(notInPlace(allocs, netns)) == 0 {
		return nil, nil, nil
	}
	log := p.podLog(pod)
	w := p.attachWork(log, pod.GetUid(), netns)
	if w.ended() {
		p.forget(pod.GetUid(), w)
		if w.err != nil {
			return nil, nil, refuse(w.err) // told once: the next creation attaches again
		}
		// It ended before a claim of the pod was prepared: again.
		w = p.attachWork(log, pod.GetUid(), netns)
	}
	if p.gate.Hook != "" {
		log.Debug("The container waits for the pod's attach in its hook", "container", ctr.GetName())
		return p.gate.hook(pod.GetUid(), netns), nil, nil
	}
	if err := p.await(ctx, pod.GetUid(), netns, w); err != nil {
		return nil, nil, refuse(err)
	}
	return nil, nil, nil
}

// refuseUndescribed is CreateContainer's answer for a pod whose sandbox
// the runtime describes without namespaces, and whose network namespace
// was not found otherwise (netnsOf): nil when the pod has no devices (a
// dra that refuses host-network pods made none), else its refusal.
func (p *Plugin) refuseUndescribed(ctx context.Context, pod *api.PodSandbox, refuse func(error) error) error {
	allocs, err := p.podAllocations(ctx, pod.GetUid(), statev1.Phase_PHASE_UNSPECIFIED)
	switch {
	case err != nil:
		return refuse(fmt.Errorf("listing the devices of the pod: %w", err))
	case len(allocs) == 0:
		return nil
	}
	err = refuse(fmt.Errorf("%s: %w", deviceList(allocs), errUndescribed))
	p.podLog(pod).Error("Container refused", "error", err)
	return err
}

// await waits for the pod's attach w, then checks that every device of the
// pod is in netns. An ended attach that did not put them there is
// forgotten: the next container's creation starts another.
func (p *Plugin) await(ctx context.Context, uid, netns string, w *podWork) error {
	if err := w.wait(ctx); err != nil {
		if w.ended() {
			p.forget(uid, w)
		}
		return err
	}
	allocs, err := p.podAllocations(ctx, uid, statev1.Phase_PHASE_UNSPECIFIED)
	if err != nil {
		return fmt.Errorf("listing the devices of the pod: %w", err)
	}
	if missing := notInPlace(allocs, netns); len(missing) > 0 {
		p.forget(uid, w)
		return fmt.Errorf("%s not in the pod's network namespace", deviceList(missing))
	}
	return nil
}

// liveAttach is the pod's attach into netns when that is the netns of its
// running sandbox (an attach is started when there is none: this plugin
// restarted since the container's creation); nil when the sandbox is not
// running, or runs in another netns.
func (p *Plugin) liveAttach(uid, netns string) *podWork {
	if ns, live := p.netnsOfLive(uid); !live || ns != netns {
		return nil
	}
	return p.attachWork(p.log.With("uid", uid), uid, netns)
}

// awaitSynchronized waits, within ctx, until the plugin is connected to
// the runtime and has learnt its sandboxes (Synchronize): a hook's call
// that reaches a plugin just restarted waits for that instead of finding
// no sandbox.
func (p *Plugin) awaitSynchronized(ctx context.Context) {
	select {
	case <-p.conn.readyChan():
	case <-ctx.Done():
	}
}

// WaitAttached implements NriServiceServer: the gate hook's wait.
func (s Service) WaitAttached(ctx context.Context, req *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
	p := s.p
	switch {
	case req.GetPodUid() == "":
		return nil, status.Error(codes.InvalidArgument, "pod_uid: empty")
	case req.GetNetnsPath() == "":
		return nil, status.Error(codes.InvalidArgument, "netns_path: empty")
	}
	p.awaitSynchronized(ctx)
	w := p.liveAttach(req.GetPodUid(), req.GetNetnsPath())
	if w == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "netdra: pod %s has no running sandbox in netns %s (or netdra's nri plugin is not connected to the runtime): its devices are not attached",
			req.GetPodUid(), req.GetNetnsPath())
	}
	err := p.await(ctx, req.GetPodUid(), req.GetNetnsPath(), w)
	switch {
	case err == nil:
		return &nriv1.WaitAttachedResponse{}, nil
	case errors.Is(err, errNotFinished):
		return nil, status.Errorf(codes.DeadlineExceeded, "netdra: pod %s: %v", req.GetPodUid(), err)
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "netdra: pod %s: %v", req.GetPodUid(), err)
	}
}
