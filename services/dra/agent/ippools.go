package agent

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// ipPoolsCheck is how often watchIPPools looks whether pools removed or
// shrunk while in use still hold addresses.
const ipPoolsCheck = 30 * time.Second

// syncIPPools gives the state service the spec's address pools. The state
// service validates them again; a refusal fails the apply, and the
// previous pools stay.
func (a *Agent) syncIPPools(ctx context.Context, spec *v1alpha1.NodeConfigSpec) error {
	if _, err := a.cfg.State.ReplaceIPPools(ctx, nodeconfig.IPPools(spec)); err != nil {
		return fmt.Errorf("setting the ip pools: %w", err)
	}
	select {
	case a.ipKick <- struct{}{}:
	default:
	}
	return nil
}

// watchIPPools keeps the NodeConfig's IPPoolsDraining condition and its
// address counts (status.ipPools, which the operator reads to add a block
// to a cluster address pool running low) current:
// True, naming the pools, while pools removed from the spec or shrunk still
// hold addresses (they keep them until their claims are unprepared); False
// otherwise. It looks after each apply and every ipPoolsCheck. It also
// gives the publisher the pools with no free address (their devices are
// tainted), at those times and after each change of the allocations or
// devices the publisher sees (a claim prepared or unprepared takes or
// gives back addresses).
func (a *Agent) watchIPPools(ctx context.Context) error {
	t := time.NewTicker(ipPoolsCheck)
	defer t.Stop()
	last := ""
	_, changed := a.pub.View()
	for {
		onlyTaints := false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.ipKick:
		case <-changed:
			onlyTaints = true // the status's counts keep to their own pace
		}
		_, changed = a.pub.View()
		a.mu.Lock()
		spec, generation := a.spec, a.generation
		a.mu.Unlock()
		resp, err := a.cfg.State.ListIPPools(ctx, &statev1.ListIPPoolsRequest{})
		if err != nil {
			a.log.Warn("Listing the ip pools", "error", err)
			continue
		}
		a.pub.SetExhaustedIPPools(nodeconfig.ExhaustedIPPools(resp.GetPools()))
		if onlyTaints {
			continue
		}
		if spec != nil {
			a.status.SetIPPools(nodeconfig.IPPoolUsage(resp.GetPools()))
		}
		if spec == nil || (len(spec.IPPools) == 0 && len(resp.GetPools()) == 0) {
			continue // no pools: no condition
		}
		cond := metav1.Condition{Type: v1alpha1.ConditionIPPoolsDraining, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonIPPoolsSettled, Message: "every address in use belongs to a configured pool's range", ObservedGeneration: generation}
		if msg := nodeconfig.IPPoolsDraining(resp.GetPools()); msg != "" {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonIPPoolsDraining, msg
		}
		if cond.Message != last {
			a.log.Info("IP pools", "draining", cond.Status == metav1.ConditionTrue, "message", cond.Message)
			last = cond.Message
		}
		a.status.SetCondition(cond)
	}
}
