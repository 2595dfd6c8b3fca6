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

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/attachstatus"
	"github.com/netdra/netdra/services/dra/callgate"
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

// serving is the kubelet plugin as it runs under one driver name.
type serving struct {
	name   string
	gate   *callgate.Gate
	helper *kubeletplugin.Helper
	slices *publish.SliceWriter
	cancel context.CancelFunc // stops the driver's retry loop
	done   chan struct{}
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

// Status implements drav1.DraServiceServer.
// waitingFor says what keeps dra from serving the kubelet, or from doing
// its job once it does: the peers it cannot reach, the NodeConfig not
// applied yet, the recovery of the node's claims (registered is whether
// the kubelet registered the plugin).
func (a *Agent) waitingFor(registered bool) []string {
	var out []string
	if a.cfg.Waiting != nil {
		out = a.cfg.Waiting()
	}
	select {
	case <-a.configured:
		if !registered {
			out = append(out, "the recovery of the node's claims and the kubelet's registration of the plugin")
		}
	default:
		out = append(out, fmt.Sprintf("NodeConfig %s applied through the provisioner's Configure (its defaults when there is none)", a.cfg.NodeName))
	}
	return out
}

func (a *Agent) Status(context.Context, *drav1.StatusRequest) (*drav1.StatusResponse, error) {
	attempts, regErr := a.reg.Status()
	a.mu.Lock()
	out := &drav1.StatusResponse{DriverName: a.driverName, Registered: a.serving != nil, ConfigGeneration: a.generation,
		RegistrationAttempts: uint32(attempts), RegistrationError: regErr}
	if a.spec != nil {
		out.ConfiguredDriverName = a.spec.DriverName
	}
	a.mu.Unlock()
	out.WaitingFor = a.waitingFor(out.GetRegistered())
	last := a.pub.Last()
	if !last.Time.IsZero() {
		out.LastPublication = timestamppb.New(last.Time)
	}
	for _, p := range last.Pools {
		out.Pools = append(out.Pools, &drav1.PoolStatus{Name: p.Name, Devices: uint32(len(p.Devices))})
	}
	return out, nil
}
