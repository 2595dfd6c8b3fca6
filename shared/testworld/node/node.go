// Package node emulates one Kubernetes node for tests: the kubelet's side of
// plugin registration and Dynamic Resource Allocation (pluginregistration/v1
// and dra/v1 over the plugins' real gRPC sockets) and a container runtime's
// side of NRI (github.com/containerd/nri/pkg/adaptation, as containerd embeds
// it), with a real named network namespace per pod sandbox.
//
// No container runs. A pod bound to the node is walked the way the kubelet
// and containerd walk it: its claims are prepared by their drivers, a network
// namespace is created, RunPodSandbox goes to the NRI plugins, and the pod is
// reported Running and Ready. A failure leaves the pod Pending with a Warning
// event and is retried with backoff. A pod marked for deletion gets
// StopPodSandbox, its namespace removed, RemovePodSandbox, its claims
// unprepared, and is then deleted from the API.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Config describes the node to emulate.
type Config struct {
	// Client talks to the apiserver with rights to write Nodes, Leases,
	// pod status, Events and to delete pods (an admin client).
	Client kubernetes.Interface
	// NodeName is the Node object's name; it is created if missing.
	NodeName string
	// RegistryDir is watched for plugin registration sockets, like the
	// kubelet's /var/lib/kubelet/plugins_registry. It is created if missing.
	RegistryDir string
	// NRISocket is where the runtime side of NRI listens for plugins,
	// like /var/run/nri/nri.sock. Keep it short: 108 bytes at most.
	NRISocket string
	// NetnsPrefix starts the name of every network namespace the node
	// creates (/var/run/netns/<prefix><pod UID>). Default "testworld-".
	NetnsPrefix string
	// Logger receives the node's logs, and those of the Kubernetes client
	// libraries it drives. Default: discard.
	Logger *slog.Logger

	// Capacity is the Node's capacity and allocatable. Default: 16 CPUs,
	// 64Gi memory, 110 pods.
	Capacity corev1.ResourceList
	// Labels are added to the Node's well-known labels.
	Labels map[string]string
	// Workers is how many pods are worked on at once. Default 16.
	Workers int
	// RetryBase and RetryMax bound the exponential backoff of a failing
	// pod. Default 200ms and 5s (the kubelet waits about 10s; tests need
	// less).
	RetryBase, RetryMax time.Duration
	// CallTimeout bounds each DRA gRPC call. Default 45s, as the kubelet.
	CallTimeout time.Duration
}

func (c *Config) defaults() error {
	switch {
	case c.Client == nil:
		return fmt.Errorf("%w: no Client", ErrConfig)
	case c.NodeName == "":
		return fmt.Errorf("%w: no NodeName", ErrConfig)
	case c.RegistryDir == "":
		return fmt.Errorf("%w: no RegistryDir", ErrConfig)
	case c.NRISocket == "":
		return fmt.Errorf("%w: no NRISocket", ErrConfig)
	case len(c.NRISocket) > 107:
		return fmt.Errorf("%w: NRISocket %q is longer than a unix socket path may be", ErrConfig, c.NRISocket)
	}
	if c.NetnsPrefix == "" {
		c.NetnsPrefix = "testworld-"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Capacity == nil {
		c.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("16"),
			corev1.ResourceMemory:           resource.MustParse("64Gi"),
			corev1.ResourcePods:             resource.MustParse("110"),
			corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		}
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.RetryBase <= 0 {
		c.RetryBase = 200 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 45 * time.Second
	}
	return nil
}

// Node is a running emulated node. Its methods are safe for concurrent use.
type Node struct {
	cfg      Config
	log      *slog.Logger
	client   kubernetes.Interface
	plugins  *registry
	runtime  *runtime
	claims   *claimCache
	pods     *podWorkers
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// Start registers the node with the apiserver, makes it Ready, starts the
// plugin watcher and the NRI runtime side, and starts working on the pods
// bound to the node. The node runs until Stop; cancelling ctx stops its
// background work too, but only Stop tears its sandboxes down.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	logger := cfg.Logger.With("node", cfg.NodeName)
	setNRILogger(logger)
	// The client libraries log through the context's logr logger.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(logger.Handler()))
	ctx, cancel := context.WithCancel(ctx)
	n := &Node{cfg: cfg, log: logger, client: cfg.Client, cancel: cancel}

	if err := os.MkdirAll(cfg.RegistryDir, 0o750); err != nil {
		cancel()
		return nil, fmt.Errorf("registry dir: %w", err)
	}
	if err := n.register(ctx); err != nil {
		cancel()
		return nil, err
	}
	n.wg.Go(func() { n.heartbeat(ctx) })

	n.plugins = newRegistry(cfg.RegistryDir, logger)
	if err := n.plugins.start(ctx, &n.wg); err != nil {
		n.abort()
		return nil, err
	}
	n.claims = newClaimCache(n.plugins, cfg.CallTimeout, logger)

	rt, err := startRuntime(ctx, filepath.Clean(cfg.NRISocket), cfg.NetnsPrefix, logger)
	if err != nil {
		n.abort()
		return nil, err
	}
	n.runtime = rt

	n.pods = newPodWorkers(n, workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](cfg.RetryBase, cfg.RetryMax))
	if err := n.pods.start(ctx, &n.wg); err != nil {
		n.abort()
		return nil, err
	}
	logger.Info("node ready", "registry", cfg.RegistryDir, "nri", cfg.NRISocket)
	return n, nil
}

func (n *Node) abort() {
	if err := n.Stop(); err != nil {
		n.log.Warn("cleaning up after a failed start", "err", err)
	}
}

// Stop stops working on pods, tears down every sandbox the node created
// (StopPodSandbox and RemovePodSandbox through NRI, network namespace
// deleted), stops the NRI runtime side and closes the plugin connections.
// It neither unprepares claims nor deletes pods or the Node object, as a
// kubelet that stops does neither. Stop is idempotent.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		n.cancel()
		if n.pods != nil {
			n.pods.shutdown()
		}
		n.wg.Wait()
		var errs []error
		if n.runtime != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			errs = append(errs, n.runtime.stop(ctx))
			cancel()
		}
		if n.plugins != nil {
			n.plugins.close()
		}
		if n.pods != nil {
			n.pods.events.Shutdown()
		}
		n.stopErr = errors.Join(errs...)
		n.log.Info("node stopped")
	})
	return n.stopErr
}

// Name is the Node object's name.
func (n *Node) Name() string { return n.cfg.NodeName }

// NRISocket is where NRI plugins connect.
func (n *Node) NRISocket() string { return n.cfg.NRISocket }

// RegistryDir is where plugins put their registration sockets.
func (n *Node) RegistryDir() string { return n.cfg.RegistryDir }

// Sandbox reports the network namespace of the pod's current sandbox: its
// name under /var/run/netns, or "" for a hostNetwork pod. ok is false while
// the pod has no sandbox (not yet created, failed, or torn down).
func (n *Node) Sandbox(podUID types.UID) (netnsName string, ok bool) {
	sb := n.runtime.sandboxOf(podUID)
	if sb == nil {
		return "", false
	}
	return sb.netns, true
}

// Plugin reports the DRA endpoint registered for driver, if any.
func (n *Node) Plugin(driver string) (endpoint string, ok bool) {
	return n.plugins.endpoint(driver)
}

// Prepared reports whether the claim is currently prepared on this node by
// every driver that has devices in it.
func (n *Node) Prepared(claimUID types.UID) bool {
	return n.claims.prepared(claimUID)
}
