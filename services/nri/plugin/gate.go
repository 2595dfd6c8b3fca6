package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// CreateContainer is the gate of fail-closed: no container of a pod starts
// unless every prepared device of the pod is in the pod's network
// namespace. It waits for the pod's attach (started by RunPodSandbox, or
// here when there is none: this plugin was not connected while the
// sandbox started) for what of it has not ended yet, then reads the pod's
// allocations. A failed attach refuses the container with the reason, and
// the next CreateContainer (the kubelet retries) attaches again; so does
// one that finds a device not in place (the claim was prepared after the
// sandbox started), once more within the hook's time. An attach still
// running when the hook's time is up refuses the container too. A pod
// without netdra devices costs one local ListAllocations and is never
// refused.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (_ *api.ContainerAdjustment, _ []*api.ContainerUpdate, err error) {
	defer func(start time.Time) { p.metrics.observe("CreateContainer", start, err) }(time.Now())
	netns := netnsOf(pod)
	if netns == "" {
		return nil, nil, nil // host network: nothing to attach
	}
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	log := p.podLog(pod)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("netdra: container %s of pod %s refused: %w", ctr.GetName(), pod.GetUid(), fmt.Errorf(format, args...))
	}
	for again := false; ; again = true {
		w := p.attachWork(log, pod.GetUid(), netns)
		if err := w.wait(ctx); err != nil {
			if w.ended() {
				p.forget(pod.GetUid(), w) // the next CreateContainer attaches again
			}
			return nil, nil, refuse("%w", err)
		}
		allocs, err := retry(ctx, func(ctx context.Context) (*statev1.ListAllocationsResponse, error) {
			return p.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{PodUid: pod.GetUid()})
		})
		if err != nil {
			return nil, nil, refuse("listing the devices of the pod: %w", err)
		}
		a := notInPlace(allocs.GetAllocations(), netns)
		if a == nil {
			return nil, nil, nil
		}
		p.forget(pod.GetUid(), w)
		if again {
			return nil, nil, refuse("device %s (claim %s/%s) is not in the pod's network namespace", a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName())
		}
		log.Warn("A device is not in the pod's netns at CreateContainer: attaching again", "device", a.GetDeviceName(), "phase", a.GetPhase())
	}
}

// notInPlace is the first allocation not attached to netns, nil when they
// all are.
func notInPlace(allocs []*statev1.Allocation, netns string) *statev1.Allocation {
	for _, a := range allocs {
		if a.GetPhase() != statev1.Phase_PHASE_ATTACHED || a.GetNetnsPath() != netns {
			return a
		}
	}
	return nil
}
