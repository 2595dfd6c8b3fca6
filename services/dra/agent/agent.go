// Package agent wires dra's parts together: the NodeConfig watch, the
// inventory pump, the ResourceSlice publisher, the prepare/unprepare driver
// and the kubelet registration, in the order the node needs them: the
// configuration first, then the inventory and the allocations (restart
// recovery), and only then registration with the kubelet.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/config"
	"github.com/netdra/netdra/services/dra/driver"
	"github.com/netdra/netdra/services/dra/inventory"
	"github.com/netdra/netdra/services/dra/kube"
	"github.com/netdra/netdra/services/dra/publish"
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
	Debounce     time.Duration
	Metrics      *Metrics
	Logger       *slog.Logger
}

// Agent is dra.
type Agent struct {
	drav1.UnimplementedDraServiceServer
	cfg    Config
	log    *slog.Logger
	pump   *inventory.Pump
	pub    *publish.Publisher
	claims *kube.Claims

	mu         sync.Mutex
	spec       *v1alpha1.NodeConfigSpec // in force; nil until the first is applied
	generation int64
	configured chan struct{}
	helper     *kubeletplugin.Helper
	driverName string
}

// New returns the agent.
func New(cfg Config) *Agent {
	a := &Agent{cfg: cfg, log: cfg.Logger, configured: make(chan struct{})}
	a.pump = inventory.New(cfg.Logger.With("part", "inventory"), cfg.Provisioner, cfg.State)
	a.pub = publish.NewPublisher(cfg.Logger.With("part", "publish"), cfg.State, cfg.Debounce, a.publish)
	recorder := kube.NewRecorder(cfg.Kube, "netdra-dra", cfg.NodeName)
	a.claims = kube.NewClaims(cfg.Kube, recorder)
	return a
}

// apply puts a valid NodeConfig spec in force: the provisioner first (it
// may refuse), then the pools.
func (a *Agent) apply(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error {
	a.mu.Lock()
	if a.spec != nil && spec.DriverName != a.spec.DriverName {
		a.mu.Unlock()
		return fmt.Errorf("driverName changed from %s to %s: restart dra to register under the new name", a.spec.DriverName, spec.DriverName)
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := a.pump.Configure(ctx, config.Managers(spec)); err != nil {
		return err
	}
	a.pub.SetPools(config.Pools(spec))
	a.mu.Lock()
	first := a.spec == nil
	a.spec, a.generation = spec, generation
	a.mu.Unlock()
	if first {
		close(a.configured)
	}
	return nil
}

// publish hands the slices to the kubelet plugin helper once registered.
func (a *Agent) publish(ctx context.Context, res *resourceslice.DriverResources) error {
	a.mu.Lock()
	h := a.helper
	a.mu.Unlock()
	if h == nil {
		return fmt.Errorf("not registered with the kubelet yet: %w", publish.ErrNotReady)
	}
	if err := h.PublishResources(ctx, *res); err != nil {
		return err
	}
	a.cfg.Metrics.published(res)
	return nil
}

// Run runs dra until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errs := make(chan error, 4)
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
	watcher := kube.NewNodeConfigWatcher(a.log.With("part", "nodeconfig"), a.cfg.Dynamic, kube.NewRecorder(a.cfg.Kube, "netdra-dra", a.cfg.NodeName), a.cfg.NodeName, a.apply)
	spawn("nodeconfig", watcher.Run)

	select {
	case <-a.configured:
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	a.mu.Lock()
	spec := a.spec
	a.mu.Unlock()
	drv, err := driver.New(driver.Config{DriverName: spec.DriverName, NodeName: a.cfg.NodeName, State: a.cfg.State,
		Provisioner: a.cfg.Provisioner, Claims: a.claims, PodLookup: a.claims.PodLookup, Logger: a.log.With("part", "driver"),
		OnFatalError: func(err error) { errs <- err }})
	if err != nil {
		return err
	}
	claims, err := kube.NodeClaims(ctx, a.log, a.cfg.Kube, a.cfg.NodeName)
	if err != nil {
		return err
	}
	if err := drv.Recover(ctx, claims); err != nil {
		return fmt.Errorf("restart recovery: %w", err)
	}
	spawn("unprepare retries", drv.Run)
	plugin := a.cfg.Metrics.wrap(drv)
	if err := a.register(ctx, spec, plugin); err != nil {
		return err
	}
	defer a.stopHelper()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		return nil
	}
}

// register starts the kubelet plugin and waits for the kubelet to register
// it, per the NodeConfig's retry settings: an attempt that is not
// registered in time is stopped (its sockets removed) and started again, so
// the kubelet's plugin watcher sees the socket anew.
func (a *Agent) register(ctx context.Context, spec *v1alpha1.NodeConfigSpec, plugin kubeletplugin.DRAPlugin) error {
	interval := time.Duration(*spec.DRARegistrationRetryInterval) * time.Second
	timeout := time.Duration(*spec.DRARegistrationTimeout) * time.Second
	attempts := int(*spec.DRARegistrationMaxAttempts)
	dataDir := filepath.Join(a.cfg.PluginDir, spec.DriverName)
	for _, d := range []string{dataDir, a.cfg.RegistrarDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("kubelet plugin directory: %w", err)
		}
	}
	for attempt := 1; ; attempt++ {
		h, err := kubeletplugin.Start(ctx, plugin,
			kubeletplugin.DriverName(spec.DriverName),
			kubeletplugin.KubeClient(a.cfg.Kube),
			kubeletplugin.NodeName(a.cfg.NodeName),
			kubeletplugin.PluginDataDirectoryPath(dataDir),
			kubeletplugin.RegistrarDirectoryPath(a.cfg.RegistrarDir),
			kubeletplugin.GRPCVerbosity(100))
		if err == nil {
			if a.waitRegistered(ctx, h, timeout) {
				a.mu.Lock()
				a.helper, a.driverName = h, spec.DriverName
				a.mu.Unlock()
				a.log.Info("Registered with the kubelet", "driver", spec.DriverName, "attempt", attempt)
				a.pub.SetPools(config.Pools(spec)) // publish now that we can
				return nil
			}
			h.Stop()
			err = fmt.Errorf("not registered within %s", timeout)
		}
		if attempt >= attempts {
			return fmt.Errorf("registration failed after %d attempts: %w", attempt, err)
		}
		a.log.Warn("Registration attempt failed; retrying", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func (a *Agent) waitRegistered(ctx context.Context, h *kubeletplugin.Helper, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st := h.RegistrationStatus(); st != nil && st.PluginRegistered {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (a *Agent) stopHelper() {
	a.mu.Lock()
	h := a.helper
	a.helper = nil
	a.mu.Unlock()
	if h != nil {
		h.Stop()
	}
}

// Status implements drav1.DraServiceServer.
func (a *Agent) Status(context.Context, *drav1.StatusRequest) (*drav1.StatusResponse, error) {
	a.mu.Lock()
	out := &drav1.StatusResponse{DriverName: a.driverName, Registered: a.helper != nil, ConfigGeneration: a.generation}
	a.mu.Unlock()
	last := a.pub.Last()
	if !last.Time.IsZero() {
		out.LastPublication = timestamppb.New(last.Time)
	}
	for _, p := range last.Pools {
		out.Pools = append(out.Pools, &drav1.PoolStatus{Name: p.Name, Devices: uint32(len(p.Devices))})
	}
	return out, nil
}

var _ = corev1.EventTypeNormal
