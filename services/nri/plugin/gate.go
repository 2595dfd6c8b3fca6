package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// CreateContainer is the second gate of fail-closed: no container of a pod
// starts unless every prepared device of the pod is in the pod's network
// namespace. RunPodSandbox attaches them; when it could not (this plugin
// was not connected while the sandbox started, or the sandbox started
// before the claim was prepared) the devices are attached here, within the
// hook's time, and when that fails the container is refused with the
// reason, which the kubelet retries. A pod without netdra devices costs one
// local ListAllocations and is never refused.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (_ *api.ContainerAdjustment, _ []*api.ContainerUpdate, err error) {
	defer func(start time.Time) { p.metrics.observe("CreateContainer", start, err) }(time.Now())
	netns := netnsOf(pod)
	if netns == "" {
		return nil, nil, nil // host network: nothing to attach
	}
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	allocs, err := retry(ctx, func(ctx context.Context) (*statev1.ListAllocationsResponse, error) {
		return p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: pod.GetUid()})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("netdra: listing the devices of pod %s before starting container %s: %w", pod.GetUid(), ctr.GetName(), err)
	}
	if inPlace(allocs.GetAllocations(), netns) {
		return nil, nil, nil
	}
	unlock := p.lockPod(pod.GetUid())
	defer unlock()
	p.mu.Lock()
	p.netns[pod.GetUid()] = netns // the sandbox runs: reconciliation may attach too
	p.mu.Unlock()
	log := p.log.With("pod", pod.GetNamespace()+"/"+pod.GetName(), "uid", pod.GetUid(), "container", ctr.GetName())
	// Read again under the pod's lock: a reconciliation may have attached.
	allocs, err = retry(ctx, func(ctx context.Context) (*statev1.ListAllocationsResponse, error) {
		return p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: pod.GetUid()})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("netdra: listing the devices of pod %s before starting container %s: %w", pod.GetUid(), ctr.GetName(), err)
	}
	for _, a := range allocs.GetAllocations() {
		if a.GetPhase() == statev1.Phase_PHASE_ATTACHED && a.GetNetnsPath() == netns {
			continue
		}
		if err := p.attach(ctx, a, pod.GetUid(), netns); err != nil {
			return nil, nil, fmt.Errorf("netdra: container %s of pod %s refused: device %s (claim %s/%s) is not in the pod's network namespace: %w",
				ctr.GetName(), pod.GetUid(), a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName(), err)
		}
		log.Warn("Attached a device at CreateContainer: the sandbox started without it", "device", a.GetDeviceName(), "netns", netns)
	}
	return nil, nil, nil
}

// inPlace reports whether every allocation is attached to netns.
func inPlace(allocs []*statev1.Allocation, netns string) bool {
	for _, a := range allocs {
		if a.GetPhase() != statev1.Phase_PHASE_ATTACHED || a.GetNetnsPath() != netns {
			return false
		}
	}
	return true
}
