// Package kubeletreg starts dra's kubelet plugin (the kubelet plugin
// helper) under a driver name and waits for the kubelet to register it,
// per the NodeConfig's retry settings: an attempt that is not registered
// in time is stopped (its sockets removed) and started again, so that the
// kubelet's plugin watcher sees the sockets anew. The sockets are dra's
// own, or taken from the socket holder (package sockkeep) when one is
// configured. It also owns what the helper leaves in the plugin
// directory: the device metadata (KEP-5304) options and directory.
package kubeletreg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/dra/sockkeep"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Config is what the registrar needs.
type Config struct {
	NodeName     string
	Kube         kubernetes.Interface
	PluginDir    string // parent of <driver>/ for the plugin socket
	RegistrarDir string
	// KeepSockets, when set, is the socket holder's handover socket: the
	// kubelet sockets are taken from it instead of created.
	KeepSockets string
	// CDIDir, when set, turns the helper's device metadata on, with its
	// CDI specs there.
	CDIDir string
	Logger *slog.Logger
}

// Registrar starts the kubelet plugin and registers it, one driver name
// at a time, and remembers how the last registration went.
type Registrar struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	attempts int    // attempts of the last registration
	lastErr  string // the last failed attempt's error; "" once registered
}

// New returns the registrar.
func New(cfg Config) *Registrar {
	return &Registrar{cfg: cfg, log: cfg.Logger}
}

// Status is the number of attempts of the last (or current) registration
// and the last failed attempt's error, "" once registered.
func (r *Registrar) Status() (attempts int, lastErr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts, r.lastErr
}

func (r *Registrar) setAttempt(attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = attempt
}

func (r *Registrar) setErr(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = msg
}

// Retry is how a registration is retried: an attempt waits Timeout for
// the kubelet, the next starts Interval later, at most MaxAttempts.
type Retry struct {
	Interval, Timeout time.Duration
	MaxAttempts       int
}

// RetryOf is spec's registration retry settings.
func RetryOf(spec *v1alpha1.NodeConfigSpec) Retry {
	return Retry{
		Interval:    time.Duration(*spec.DRARegistrationRetryInterval) * time.Second,
		Timeout:     time.Duration(*spec.DRARegistrationTimeout) * time.Second,
		MaxAttempts: int(*spec.DRARegistrationMaxAttempts),
	}
}

// Register starts plugin under driver name and returns its helper once
// the kubelet registered it, retrying per retry. An error is ctx's, a
// plugin directory that cannot be made, the socket holder's, or the last
// attempt's after MaxAttempts.
func (r *Registrar) Register(ctx context.Context, name string, retry Retry, plugin kubeletplugin.DRAPlugin) (*kubeletplugin.Helper, error) {
	for _, d := range []string{filepath.Join(r.cfg.PluginDir, name), r.cfg.RegistrarDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("kubelet plugin directory: %w", err)
		}
	}
	for attempt := 1; ; attempt++ {
		r.setAttempt(attempt)
		// A retry takes the held sockets anew, so that the kubelet's
		// plugin watcher sees them again.
		held, err := r.takeSockets(ctx, name, attempt > 1)
		if err != nil {
			return nil, err
		}
		h, err := r.attempt(ctx, name, attempt, retry.Timeout, plugin, held)
		if err == nil {
			r.setErr("")
			return h, nil
		}
		r.setErr(err.Error())
		if attempt >= retry.MaxAttempts {
			return nil, fmt.Errorf("registration failed after %d attempts: %w", attempt, err)
		}
		r.log.Warn("Registration attempt failed; retrying", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retry.Interval):
		}
	}
}

// attempt is one registration attempt: it starts the helper, on the held
// sockets when there are (nil: its own), and waits up to timeout for the
// kubelet to register it. The helper is stopped when it is not registered
// in time.
func (r *Registrar) attempt(ctx context.Context, name string, attempt int, timeout time.Duration, plugin kubeletplugin.DRAPlugin, held *sockkeep.Sockets) (*kubeletplugin.Helper, error) {
	h, err := kubeletplugin.Start(ctx, plugin, append(r.options(name), held.Options()...)...)
	held.CloseUnused()
	if err != nil {
		return nil, err
	}
	if held.Registered() {
		// The kubelet registered the plugin on these very sockets before
		// dra restarted, and its plugin watcher saw no change since: it
		// does not register it again.
		r.log.Info("Serving the kubelet on the held sockets it registered", "driver", name)
		return h, nil
	}
	if waitRegistered(ctx, h, timeout) {
		held.MarkRegistered(ctx)
		r.log.Info("Registered with the kubelet", "driver", name, "attempt", attempt)
		return h, nil
	}
	h.Stop()
	return nil, fmt.Errorf("not registered within %s", timeout)
}

// options are the kubelet plugin helper's options for driver name, on
// sockets it creates itself.
func (r *Registrar) options(name string) []kubeletplugin.Option {
	return append([]kubeletplugin.Option{
		kubeletplugin.DriverName(name),
		kubeletplugin.KubeClient(r.cfg.Kube),
		kubeletplugin.NodeName(r.cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(filepath.Join(r.cfg.PluginDir, name)),
		kubeletplugin.RegistrarDirectoryPath(r.cfg.RegistrarDir),
		// The driver takes its own locks (one call per claim, one
		// interface-name check per pod; the state service's intents
		// across processes), so the kubelet's calls for different pods
		// run at once: serialized, a burst of pods queued behind every
		// prepare before theirs. One dra runs per node (the DaemonSet
		// surges none), so no lock file is needed across instances.
		kubeletplugin.Serialize(false),
		kubeletplugin.GRPCVerbosity(100)}, r.metadataOptions()...)
}

// takeSockets takes the kubelet sockets of driver name from the socket
// holder (renew: created anew), noting in the registration's error why it
// waits for the holder; nil without a holder.
func (r *Registrar) takeSockets(ctx context.Context, name string, renew bool) (*sockkeep.Sockets, error) {
	if r.cfg.KeepSockets == "" {
		return nil, nil
	}
	return sockkeep.TakeKubelet(ctx, r.log, r.cfg.KeepSockets, r.socketPaths(name), renew, r.setErr)
}

// socketPaths are the kubelet sockets of driver name.
func (r *Registrar) socketPaths(name string) []string {
	return sockkeep.KubeletPaths(r.cfg.PluginDir, r.cfg.RegistrarDir, name)
}

// WatchHolder returns, while the plugin under driver name is served (until
// ctx ends, then nil), once the socket holder no longer holds its sockets
// (sockkeep.WatchHolder): why dra must stop. Without a holder it returns
// nil at once.
func (r *Registrar) WatchHolder(ctx context.Context, name string) error {
	if r.cfg.KeepSockets == "" {
		return nil
	}
	return sockkeep.WatchHolder(ctx, r.log, r.cfg.KeepSockets, r.socketPaths(name))
}

// registeredPoll is how often waitRegistered looks at the helper's
// registration status.
const registeredPoll = 50 * time.Millisecond

// waitRegistered reports whether the kubelet registered h's plugin within
// timeout and while ctx lasts, looking every registeredPoll.
func waitRegistered(ctx context.Context, h *kubeletplugin.Helper, timeout time.Duration) bool {
	return wait.PollUntilContextTimeout(ctx, registeredPoll, timeout, true, func(context.Context) (bool, error) {
		st := h.RegistrationStatus()
		return st != nil && st.PluginRegistered, nil
	}) == nil
}

// metadataOptions turn on the kubelet plugin helper's device metadata
// (KEP-5304), written as v1beta1 (the newest the helper knows), with its
// CDI specs in the CDI directory. The helper writes them inside
// NodePrepareResources, so the kubelet waits for every write: they are
// written atomically but not fsynced (cdispec.WriteFile; the helper's own
// writer syncs each file and its directory). Nothing is lost to a crash of
// dra (the page cache keeps them); after a node's reboot the kubelet
// prepares every claim again before it creates a container (its
// checkpointed claims come back unprepared), which writes them again.
func (r *Registrar) metadataOptions() []kubeletplugin.Option {
	if r.cfg.CDIDir == "" {
		return nil
	}
	return []kubeletplugin.Option{
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
		kubeletplugin.CDIDirectory(r.cfg.CDIDir),
		kubeletplugin.MetadataFileOps(kubeletplugin.MetadataFileOperations{WriteFile: cdispec.WriteFile}),
	}
}

// RemoveEmptyMetadataDir removes the device metadata directory the
// kubelet plugin helper makes in driver's plugin directory, when no
// claim's metadata is left in it: an uninstall leaves nothing of dra's
// there. One still in use (a claim prepared, its pod's containers mount
// from it) is not empty and stays. A failure is logged, nothing more.
func (r *Registrar) RemoveEmptyMetadataDir(driver string) {
	dir := filepath.Join(r.cfg.PluginDir, driver, metadataDir)
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		r.log.Warn("Could not remove the empty device metadata directory", "dir", dir, "error", err)
	}
}

// metadataDir is the kubelet plugin helper's device metadata directory in
// the driver's plugin directory (KEP-5304; not exported by the helper).
const metadataDir = "dra-device-metadata"
