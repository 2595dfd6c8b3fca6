package agent

import (
	"context"
	"time"

	"github.com/netdra/netdra/services/dra/callgate"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// apply puts a valid NodeConfig spec in force: a driver name change is
// checked first (it is refused while claims are prepared: package
// rename), then the provisioner (it may refuse), then the pools, then the
// kubelet plugin under the new name.
func (a *Agent) apply(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error {
	a.serveMu.Lock()
	defer a.serveMu.Unlock()
	rn, err := a.renames.Begin(ctx, spec, generation)
	if err != nil {
		return err
	}
	if err := a.configure(ctx, spec); err != nil {
		rn.Cancel()
		return err
	}
	if err := rn.Complete(ctx); err != nil {
		return err
	}
	a.setSpec(spec, generation)
	rn.ServeNewName()
	return nil
}

// putInForce configures the provisioner and the pools with spec and makes
// it the spec in force.
func (a *Agent) putInForce(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error {
	if err := a.configure(ctx, spec); err != nil {
		return err
	}
	a.setSpec(spec, generation)
	return nil
}

// configure sends spec's configuration to the provisioner. A field the
// provisioner refuses (a vfCount above its PF's sriov_totalvfs) is a
// *fielderr.Error named as the spec names it (nodeconfig.ProvisionerError).
func (a *Agent) configure(ctx context.Context, spec *v1alpha1.NodeConfigSpec) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := a.pump.Configure(ctx, nodeconfig.Provisioner(spec)); err != nil {
		return nodeconfig.ProvisionerError(err)
	}
	return a.ipPools.Sync(ctx, spec)
}

// inForce is the spec in force, nil before the first, and its generation.
func (a *Agent) inForce() (*v1alpha1.NodeConfigSpec, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spec, a.generation
}

// setSpec makes spec the one in force and publishes its pools.
func (a *Agent) setSpec(spec *v1alpha1.NodeConfigSpec, generation int64) {
	a.pub.SetPools(nodeconfig.Pools(spec))
	a.mu.Lock()
	first := a.spec == nil
	a.spec, a.generation = spec, generation
	a.mu.Unlock()
	if first {
		close(a.configured)
	}
}

// renameHost is the agent as package rename works on it, under serveMu.
type renameHost struct{ a *Agent }

func (h renameHost) Served() (string, *callgate.Gate) {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	if s := h.a.serving; s != nil {
		return s.name, s.gate
	}
	return "", nil
}

func (h renameHost) InForce() *v1alpha1.NodeConfigSpec {
	spec, _ := h.a.inForce()
	return spec
}

func (h renameHost) Configure(ctx context.Context, spec *v1alpha1.NodeConfigSpec) error {
	return h.a.configure(ctx, spec)
}

func (h renameHost) PutInForce(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error {
	return h.a.putInForce(ctx, spec, generation)
}

func (h renameHost) StopServing() { h.a.stopServingLocked() }

func (h renameHost) ServeAgain() { h.a.restartLocked() }

// retryApply has the NodeConfig watcher apply the NodeConfig again; before
// the watcher runs there is nothing to retry.
func (a *Agent) retryApply() {
	a.mu.Lock()
	w := a.watcher
	a.mu.Unlock()
	if w != nil {
		w.Retry()
	}
}
