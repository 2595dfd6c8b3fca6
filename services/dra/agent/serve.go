package agent

import (
	"context"
	"fmt"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/netdra/netdra/services/dra/callgate"
	"github.com/netdra/netdra/services/dra/kubeletreg"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// serving is the kubelet plugin as it runs under one driver name.
type serving struct {
	name   string
	gate   *callgate.Gate
	helper *kubeletplugin.Helper
	slices *publish.SliceWriter
	cancel context.CancelFunc // stops the driver's retry loop
	done   chan struct{}
}

// serveLocked starts the driver under name (its retry loop included) and
// registers it with the kubelet, per spec's retry settings. serveMu is
// held.
func (a *Agent) serveLocked(ctx context.Context, name string, spec *v1alpha1.NodeConfigSpec) error {
	drv, err := a.newDriver(name, spec)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithCancel(ctx)
	s := &serving{name: name, gate: &callgate.Gate{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = drv.Run(dctx)
	}()
	h, err := a.reg.Register(ctx, name, kubeletreg.RetryOf(spec), callgate.Wrap(a.cfg.Metrics.Wrap(drv), s.gate))
	if err != nil {
		cancel()
		<-s.done
		return err
	}
	s.helper = h
	s.slices = publish.NewSliceWriter(name, a.cfg.NodeName, a.cfg.Kube,
		func(_ context.Context, err error, msg string) {
			a.log.Warn("Publishing ResourceSlices", "driver", name, "msg", msg, "err", err)
		})
	go a.watchHolder(dctx, name)
	a.mu.Lock()
	a.serving, a.driverName = s, name
	a.mu.Unlock()
	a.status.SetDriverName(name)
	a.pub.SetPools(nodeconfig.Pools(spec))
	a.pub.Republish() // publish now that we can, through the new plugin's controller
	return nil
}

// restartLocked serves the plugin again, under the driver name in force
// when it gets to it, in the background of the agent's run (serveMu is
// held by the caller); a registration that fails for good stops dra.
func (a *Agent) restartLocked() {
	a.mu.Lock()
	ctx := a.runCtx
	a.mu.Unlock()
	go func() {
		a.serveMu.Lock()
		defer a.serveMu.Unlock()
		a.mu.Lock()
		spec, running := a.spec, a.serving != nil
		a.mu.Unlock()
		if running || ctx.Err() != nil {
			return
		}
		if err := a.serveLocked(ctx, spec.DriverName, spec); err != nil && ctx.Err() == nil {
			a.fatal <- err
		}
	}()
}

// stopServing stops the kubelet plugin and the driver's retry loop.
func (a *Agent) stopServing() {
	a.serveMu.Lock()
	defer a.serveMu.Unlock()
	a.stopServingLocked()
}

func (a *Agent) stopServingLocked() {
	a.mu.Lock()
	s := a.serving
	a.serving = nil
	a.mu.Unlock()
	if s == nil {
		return
	}
	s.slices.Stop()
	s.helper.Stop()
	s.cancel()
	<-s.done
	a.reg.RemoveEmptyMetadataDir(s.name)
	a.log.Info("Kubelet plugin stopped", "driver", s.name)
}

// watchHolder stops dra when the socket holder no longer holds the
// kubelet sockets of driver name (kubeletreg's WatchHolder), until ctx
// ends.
func (a *Agent) watchHolder(ctx context.Context, name string) {
	err := a.reg.WatchHolder(ctx, name)
	if err == nil {
		return
	}
	select {
	case a.fatal <- err:
	case <-ctx.Done():
	}
}

// publish hands the pools to the slice publisher once registered, and
// reports them on the NodeConfig's status.
func (a *Agent) publish(ctx context.Context, ps []publish.Pool) error {
	a.mu.Lock()
	s := a.serving
	a.mu.Unlock()
	if s == nil || s.helper == nil {
		return fmt.Errorf("not registered with the kubelet yet: %w", publish.ErrNotReady)
	}
	if err := s.slices.Publish(ctx, ps); err != nil {
		return err
	}
	a.cfg.Metrics.Published(ps)
	a.status.SetPublished(nodeconfig.PublishedPools(ps))
	return nil
}
