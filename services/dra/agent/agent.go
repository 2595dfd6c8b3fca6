// Package agent wires dra's parts together: the NodeConfig watch, the
// inventory pump, the ResourceSlice publisher, the prepare/unprepare driver,
// device health and the kubelet registration, in the order the node needs
// them: the configuration first, then the inventory and the allocations
// (restart recovery), and only then registration with the kubelet.
//
// A change of the NodeConfig's driverName is applied without a restart
// when no claim is prepared on the node: the kubelet plugin is stopped (its
// sockets removed), the old driver's ResourceSlices of this node deleted,
// and the plugin registered and the pools published under the new name.
// While claims are prepared under the old name the change is refused (the
// kubelet could not unprepare them under the new one): the Applied
// condition says so with the number of claims, the old name stays, and the
// change is retried until they are gone. Package rename holds that
// protocol.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/attachstatus"
	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/dra/claims"
	"github.com/netdra/netdra/services/dra/devicesync"
	"github.com/netdra/netdra/services/dra/drametrics"
	"github.com/netdra/netdra/services/dra/driver"
	"github.com/netdra/netdra/services/dra/health"
	"github.com/netdra/netdra/services/dra/kubeletreg"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/services/dra/rename"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Config is what the agent needs.
type Config struct {
	NodeName     string
	Kube         kubernetes.Interface
	Dynamic      dynamic.Interface
	State        statev1.StateServiceClient
	Provisioner  provisionerv1.ProvisionerServiceClient
	PluginDir    string // parent of <driver>/ for the plugin socket
	RegistrarDir string
	// KeepSockets, when set, is the handover socket of the holder of the
	// kubelet sockets (package sockkeep): the plugin and registration
	// sockets are taken from it instead of created, and stay listening
	// while dra restarts. Empty: dra creates and removes them itself.
	KeepSockets string
	// CDIDir is the CDI spec directory the container runtime reads: the
	// claims' CDI specs (package cdispec) and the kubelet plugin helper's
	// device metadata specs (KEP-5304) go there. Empty: neither.
	CDIDir string
	// NetnsHook is the netdra-hook binary on the host (the DaemonSet
	// installs it with `nri install-hook`), put on each device with an
	// interface as a CDI createRuntime hook, `netdra-hook check-netns`,
	// that keeps a container from starting without its devices even when
	// nri is away; "" for none, leaving nri's CreateContainer gate and the
	// runtime's required-plugin validator. It needs CDIDir.
	NetnsHook string
	// GateSocket is nri's gate socket on the host: the NetnsHook asks it
	// first, and waits until nri says the pod's devices are attached (nri
	// then adds no hook of its own to the container). "" for none.
	GateSocket string
	// Debounce is the longest a burst of changes is gathered into one
	// publication (it is published once the changes pause, or when
	// Debounce ends), and the shortest time between two publications.
	Debounce time.Duration
	Metrics  *drametrics.Metrics
	Logger   *slog.Logger
	// Waiting, when set, says which peers dra cannot reach and why
	// (process.Peers.Watch): Status reports it.
	Waiting func() []string
}

// Agent is dra.
type Agent struct {
	drav1.UnimplementedDraServiceServer
	cfg     Config
	log     *slog.Logger
	pump    *devicesync.Pump
	pub     *publish.Publisher
	claims  *claims.Claims
	status  *nodeconfig.StatusWriter
	health  *health.Watcher
	fatal   chan error
	ipPools *nodeconfig.IPPoolWatch
	reg     *kubeletreg.Registrar
	renames *rename.Renamer

	// serveMu serializes starting and stopping the kubelet plugin.
	serveMu sync.Mutex

	mu         sync.Mutex
	spec       *v1alpha1.NodeConfigSpec // in force; nil until the first is applied
	generation int64
	configured chan struct{}
	runCtx     context.Context // the lifetime of the plugin; set when it is first served
	serving    *serving        // nil while the plugin is not served
	driverName string          // the name registered under, "" before
	watcher    *nodeconfig.Watcher
}

// New returns the agent.
func New(cfg Config) *Agent {
	a := &Agent{cfg: cfg, log: cfg.Logger, configured: make(chan struct{}), fatal: make(chan error, 4)}
	a.pump = devicesync.New(cfg.Logger.With("part", "devicesync"), cfg.Provisioner, cfg.State)
	a.pub = publish.NewPublisher(cfg.Logger.With("part", "publish"), cfg.State, cfg.Debounce, a.publish)
	// The state service keeps the inventory in memory: a restarted one
	// gets it again.
	a.pub.OnRestart(a.pump.Resend)
	recorder := newRecorder(cfg.Kube, "netdra-dra", cfg.NodeName)
	a.claims = claims.NewClaims(cfg.Kube, recorder)
	a.reg = kubeletreg.New(kubeletreg.Config{NodeName: cfg.NodeName, Kube: cfg.Kube, PluginDir: cfg.PluginDir,
		RegistrarDir: cfg.RegistrarDir, KeepSockets: cfg.KeepSockets, CDIDir: cfg.CDIDir, Logger: cfg.Logger})
	a.status = nodeconfig.NewStatusWriter(cfg.Logger.With("part", "status"), cfg.Dynamic, cfg.NodeName)
	a.renames = rename.New(rename.Config{NodeName: cfg.NodeName, Kube: cfg.Kube, State: cfg.State, Logger: cfg.Logger,
		Host: renameHost{a}, Allocations: a.pub, Retry: a.retryApply})
	a.health = health.New(a.pub, a.cfg.NodeName, 0)
	a.pump.OnWarnings(nodeconfig.NewManagerWarnings(cfg.Logger, a.status, func() int64 {
		_, generation := a.inForce()
		return generation
	}).Set)
	a.ipPools = nodeconfig.NewIPPoolWatch(cfg.Logger, cfg.State, a.pub, a.status, a.inForce)
	return a
}

// Run runs dra until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 7)
	spawn := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	spawn("inventory", a.pump.Run)
	spawn("publisher", a.pub.Run)
	spawn("attach status", attachstatus.New(a.log.With("part", "attachstatus"), a.pub, a.claims, a.cfg.NodeName, 0).Run)
	spawn("nodeconfig status", a.status.Run)
	spawn("ip pools", a.ipPools.Run)
	watcher := nodeconfig.NewWatcher(a.log.With("part", "nodeconfig"), a.cfg.Dynamic,
		newRecorder(a.cfg.Kube, "netdra-dra", a.cfg.NodeName), a.status, a.cfg.NodeName, a.apply)
	a.mu.Lock()
	a.runCtx, a.watcher = ctx, watcher
	a.mu.Unlock()
	spawn("nodeconfig", watcher.Run)
	spawn("rename", a.renames.Run)

	select {
	case <-a.configured:
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := a.recover(ctx); err != nil {
		return err
	}
	defer a.stopServing()
	a.serveMu.Lock()
	a.mu.Lock()
	spec := a.spec
	a.mu.Unlock()
	err := a.serveLocked(ctx, spec.DriverName, spec)
	a.serveMu.Unlock()
	if err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	case err := <-a.fatal:
		return err
	case <-ctx.Done():
		return nil
	}
}

// recover reconciles the state with the claims of the node's pods, before
// the kubelet is served. It does not depend on the driver name beyond the
// claims' results, so it runs once, under the name first configured.
func (a *Agent) recover(ctx context.Context) error {
	a.mu.Lock()
	spec := a.spec
	a.mu.Unlock()
	drv, err := a.newDriver(spec.DriverName, spec)
	if err != nil {
		return err
	}
	nodeClaims, err := claims.NodeClaims(ctx, a.log, a.cfg.Kube, a.cfg.NodeName)
	if err != nil {
		return err
	}
	if err := drv.Recover(ctx, nodeClaims); err != nil {
		return fmt.Errorf("restart recovery: %w", err)
	}
	return nil
}

func (a *Agent) newDriver(name string, spec *v1alpha1.NodeConfigSpec) (*driver.Driver, error) {
	return driver.New(driver.Config{DriverName: name, NodeName: a.cfg.NodeName, State: a.cfg.State,
		Provisioner: a.cfg.Provisioner, Claims: a.claims, PodLookup: a.claims.PodLookup, Health: a.health,
		Pools:  nodeconfig.Pools(spec),
		Logger: a.log.With("part", "driver"), OnFatalError: func(err error) { a.fatal <- err },
		CDI: a.cdi(), DeviceMetadata: a.cfg.CDIDir != "", RideOut: driver.DefaultRideOut, OnDeviceLost: a.cfg.Metrics.DeviceLost})
}

// cdi is the CDI spec directory, or nil when none is configured.
func (a *Agent) cdi() *cdispec.Dir {
	if a.cfg.CDIDir == "" {
		return nil
	}
	return cdispec.New(a.cfg.CDIDir).WithNetnsHook(cdispec.Hook{Path: a.cfg.NetnsHook, GateSocket: a.cfg.GateSocket})
}
