package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/containerd/nri/pkg/api"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/shared/hookargs"
)

// Gate is where a container of a pod whose attach still runs waits for it
// outside the runtime's NRI lock: an OCI createRuntime hook that runc runs
// as it creates the container (after CreateContainer returned, holding no
// lock of the runtime's) and that asks the plugin on its gate socket
// (package gatehook). The hook is dra's CDI hook (`netdra-hook
// check-netns -socket <Socket>`) on a container of a claim whose CDI
// devices carry it; for another container, the plugin adds its own
// (`<Hook> wait-attached`) when it has one.
type Gate struct {
	// Hook is the netdra-hook binary's path on the host (the DaemonSet
	// installs it there with `nri install-hook`, for dra's netns check
	// hook too); empty: a container without dra's gate hook waits in
	// CreateContainer.
	Hook string
	// Socket is the plugin's gate socket, at the path the host sees.
	Socket string
}

// WithGate makes the plugin leave a container's wait for its pod's attach
// to the gate's hooks (g.Socket set, and served with ServeGate): dra's
// when the container has it, else g.Hook's when set.
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

// waitsOnGate reports whether one of the container's createRuntime hooks
// (dra's, from the claim's CDI spec) asks the gate itself.
func waitsOnGate(ctr *api.Container) bool {
	return slices.ContainsFunc(ctr.GetHooks().GetCreateRuntime(), func(h *api.Hook) bool { return hookargs.WaitsOnGate(h.GetArgs()) })
}

// CreateContainer is the gate of fail-closed: no container of a pod starts
// unless every prepared device of the pod is in the pod's network
// namespace. A container whose own hooks ask the gate (dra's CDI hook)
// costs nothing here: the gate decides when the hook asks. For another,
// the decision is admit's; when it must wait for the pod's attach, it
// waits in the gate hook the plugin adds (WithGate with a Hook), so that
// the wait holds no lock of the runtime's, or here, within the hook's
// time. A failed attach refuses the container with the reason, and the
// kubelet's next creation attaches again.
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
	if p.gate.Socket != "" && waitsOnGate(ctr) {
		return nil, nil, nil
	}
	log := p.podLog(pod)
	w, err := p.admit(ctx, log, pod.GetUid(), netns)
	switch {
	case err != nil:
		return nil, nil, refuse(err)
	case w == nil:
		return nil, nil, nil
	case p.gate.Socket != "" && p.gate.Hook != "":
		log.Debug("The container waits for the pod's attach in its hook", "container", ctr.GetName())
		return p.gate.hook(pod.GetUid(), netns), nil, nil
	}
	if err := p.await(ctx, pod.GetUid(), netns, w); err != nil {
		return nil, nil, refuse(err)
	}
	return nil, nil, nil
}

// admit decides for a container of the pod uid whose sandbox is in netns:
// nil and no error when every device of the pod is there (or it has
// none). Otherwise the pod's attach to wait for (RunPodSandbox's, or one
// started here when it failed, or when there is none: the sandbox started
// while this plugin was not connected, or before a claim was prepared),
// or the error of an attach that failed, told once: the next call starts
// another. The first container after the pod's attach ended with its
// devices all in place (or found none) costs no call; the others, and a
// pod without devices whose attach still runs, one local ListAllocations.
func (p *Plugin) admit(ctx context.Context, log *slog.Logger, uid, netns string) (*podWork, error) {
	if p.freshAttach(uid, netns) {
		return nil, nil // its attach has just put every device there
	}
	allocs, err := p.podAllocations(ctx, uid, statev1.Phase_PHASE_UNSPECIFIED)
	if err != nil {
		return nil, fmt.Errorf("listing the devices of the pod: %w", err)
	}
	// While the pod's attach or detach runs, the rows say what was, not
	// what will be: wait for it, unless the pod has no device at all.
	if len(allocs) == 0 || !p.hasWork(uid) && len(notInPlace(allocs, netns)) == 0 {
		return nil, nil
	}
	w := p.attachWork(log, uid, netns)
	if w.ended() {
		p.forget(uid, w)
		if w.err != nil {
			return nil, w.err
		}
		// It ended before a claim of the pod was prepared: again.
		w = p.attachWork(log, uid, netns)
	}
	return w, nil
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

// GateWait is the gate's answer to a hook's question (gatehook.Server's
// Wait): nil once every prepared device of the pod is in the network
// namespace of its running sandbox (req.Netns, when the hook names it,
// must be that one), after the pod's attach ended; else the refusal, with
// the device and the reason, or that the attach has not ended within ctx.
// A plugin just started waits, within ctx, until it has learnt the
// runtime's sandboxes.
func (p *Plugin) GateWait(ctx context.Context, req gatehook.Request) (err error) {
	defer func(start time.Time) { p.metrics.observe("GateWait", start, err) }(time.Now())
	p.awaitSynchronized(ctx)
	uid := req.PodUID
	netns, live := p.netnsOfLive(uid)
	if !live || req.Netns != "" && req.Netns != netns {
		where := ""
		if req.Netns != "" {
			where = " in netns " + req.Netns
		}
		return fmt.Errorf("netdra: pod %s has no running sandbox%s (or netdra's nri plugin is not connected to the runtime): its devices are not attached", uid, where)
	}
	w, err := p.admit(ctx, p.log.With("uid", uid), uid, netns)
	if err == nil && w != nil {
		err = p.await(ctx, uid, netns, w)
	}
	if err != nil {
		return fmt.Errorf("netdra: pod %s: %w", uid, err)
	}
	return nil
}
