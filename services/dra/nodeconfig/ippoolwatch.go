package nodeconfig

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// ipPoolsCheck is how often the IPPoolWatch looks whether pools removed
// or shrunk while in use still hold addresses.
const ipPoolsCheck = 30 * time.Second

// ExhaustedSink is what the IPPoolWatch tells which ip pools have no free
// address (their devices are tainted), and whose view's changes (a claim
// prepared or unprepared takes or gives back addresses) make it look
// again: the ResourceSlice publisher.
type ExhaustedSink interface {
	View() (publish.View, <-chan struct{})
	SetExhaustedIPPools(names []string)
}

// IPPoolWatch hands the state service the NodeConfig's address pools and
// keeps what the NodeConfig's status says of them current.
type IPPoolWatch struct {
	log     *slog.Logger
	state   statev1.StateServiceClient
	sink    ExhaustedSink
	status  *StatusWriter
	inForce func() (*v1alpha1.NodeConfigSpec, int64)
	kick    chan struct{}
	// last is the IPPoolsDraining condition's message last logged.
	last string
}

// NewIPPoolWatch returns the watch of the state service's ip pools;
// inForce says the spec in force (nil before the first) and its
// generation.
func NewIPPoolWatch(log *slog.Logger, state statev1.StateServiceClient, sink ExhaustedSink, status *StatusWriter,
	inForce func() (*v1alpha1.NodeConfigSpec, int64)) *IPPoolWatch {
	return &IPPoolWatch{log: log, state: state, sink: sink, status: status, inForce: inForce, kick: make(chan struct{}, 1)}
}

// Sync gives the state service the spec's address pools, and has Run look
// at them now. The state service validates them again; an error is its
// refusal (or its absence), which fails the apply, and the previous pools
// stay.
func (w *IPPoolWatch) Sync(ctx context.Context, spec *v1alpha1.NodeConfigSpec) error {
	if _, err := w.state.ReplaceIPPools(ctx, IPPools(spec)); err != nil {
		return fmt.Errorf("setting the ip pools: %w", err)
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

// Run keeps the NodeConfig's IPPoolsDraining condition and its address
// counts (status.ipPools, which the operator reads to add a block to a
// cluster address pool running low) current until ctx ends: True, naming
// the pools, while pools removed from the spec or shrunk still hold
// addresses (they keep them until their claims are unprepared); False
// otherwise. It looks after each Sync and every ipPoolsCheck. It also
// tells the sink the pools with no free address, at those times and after
// each change of the sink's view.
func (w *IPPoolWatch) Run(ctx context.Context) error {
	t := time.NewTicker(ipPoolsCheck)
	defer t.Stop()
	_, changed := w.sink.View()
	for {
		onlyTaints := false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-w.kick:
		case <-changed:
			onlyTaints = true // the status's counts keep to their own pace
		}
		_, changed = w.sink.View()
		w.look(ctx, onlyTaints)
	}
}

// look reads the state service's ip pools and tells the sink which are
// exhausted; unless onlyTaints, it also updates the NodeConfig's status.
// A state service it cannot reach is logged, and looked at next time.
func (w *IPPoolWatch) look(ctx context.Context, onlyTaints bool) {
	spec, generation := w.inForce()
	resp, err := w.state.ListIPPools(ctx, &statev1.ListIPPoolsRequest{})
	if err != nil {
		w.log.Warn("Listing the ip pools", "error", err)
		return
	}
	w.sink.SetExhaustedIPPools(ExhaustedIPPools(resp.GetPools()))
	if onlyTaints {
		return
	}
	if spec != nil {
		w.status.SetIPPools(IPPoolUsage(resp.GetPools()))
	}
	if spec == nil || (len(spec.IPPools) == 0 && len(resp.GetPools()) == 0) {
		return // no pools: no condition
	}
	w.setDraining(resp.GetPools(), generation)
}

// setDraining sets the IPPoolsDraining condition from the state service's
// pools, logging each change of its message.
func (w *IPPoolWatch) setDraining(pools []*statev1.IPPoolStatus, generation int64) {
	cond := metav1.Condition{Type: v1alpha1.ConditionIPPoolsDraining, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonIPPoolsSettled, Message: "every address in use belongs to a configured pool's range", ObservedGeneration: generation}
	if msg := IPPoolsDraining(pools); msg != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonIPPoolsDraining, msg
	}
	if cond.Message != w.last {
		w.log.Info("IP pools", "draining", cond.Status == metav1.ConditionTrue, "message", cond.Message)
		w.last = cond.Message
	}
	w.status.SetCondition(cond)
}
