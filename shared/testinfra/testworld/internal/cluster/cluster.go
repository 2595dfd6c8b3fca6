// Package cluster runs a real Kubernetes control plane — embedded etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler from
// k8s.io/kubernetes — inside the calling process.
//
// The components keep process-global state (feature gates, metric
// registries, klog and logsapi settings, configz, informer names), so Run can
// be called once per process. The testworld command runs it in a child
// process of its own for that reason; tests reach it through the controlplane
// package, never by importing this one.
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	// client-go's request and rate-limiter metrics of the components'
	// clients, on the apiserver's /metrics, as the components' own
	// commands register them.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"

	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// Config says where the control plane keeps its files and how much the
// components log.
type Config struct {
	// Dir holds etcd's data, the PKI and the admin kubeconfig. It must
	// exist. A Dir that holds them from an earlier run is resumed: etcd
	// keeps its data, the CA, certificates and admin kubeconfig are
	// reused and the apiserver listens on the same address, so clients of
	// the earlier run carry on as after an apiserver restart.
	Dir string
	// Verbosity is the klog -v of every component; their logs go to stderr.
	Verbosity int
	// Logger receives the runner's own progress lines.
	Logger *slog.Logger
	// PodAccess makes the kubernetes Service's ClusterIP answer on this
	// host (see serviceProxy), so that pods of a real node reach the
	// apiserver with their in-cluster configuration. It needs root.
	PodAccess bool
	// ComponentQPS, when positive, is the controller-manager's and the
	// scheduler's apiserver client rate (--kube-api-qps), with a burst of
	// twice that; 0 keeps their defaults (20 and 50 a second).
	ComponentQPS float64
}

// Info tells a client how to reach a ready control plane.
type Info struct {
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	Etcd       string `json:"etcd"`
	// KubernetesService is the kubernetes Service's ClusterIP and port
	// (KUBERNETES_SERVICE_HOST and _PORT in pods), answering only with
	// PodAccess.
	KubernetesService string `json:"kubernetesService"`
}

// Controllers is the kube-controller-manager --controllers value: every
// default controller but node-lifecycle, which would taint and evict a node
// whose kubelet posts no heartbeats.
const Controllers = "*,-node-lifecycle-controller"

// shutdownWait bounds how long Run waits for each component to return once
// its context is cancelled.
const shutdownWait = 10 * time.Second

// Run starts the control plane, calls ready once the apiserver answers
// /readyz and the controller-manager and scheduler are running, and then
// blocks until ctx is cancelled or a component fails. It stops the
// components, closes etcd and returns; the error is nil after a cancel.
// Run may be called once per process.
func Run(ctx context.Context, cfg Config, ready func(Info)) error {
	logger := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	// Three components apply their logging options in one process.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged

	etcd, err := startEtcd(ctx, filepath.Join(cfg.Dir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Close()
	logger.Info("etcd ready", "url", etcd.url)

	kubeconfig := filepath.Join(cfg.Dir, "admin.kubeconfig")
	p, ln, err := pkiAndListener(filepath.Join(cfg.Dir, "pki"), kubeconfig, logger)
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	svc := serviceNetFor(port)
	stopProxy, err := svc.proxy(cfg.PodAccess, ln.Addr().String(), logger)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopProxy()

	comps := newComponents(ctx, logger)
	defer comps.stop()
	verbosity := "--v=" + strconv.Itoa(cfg.Verbosity)

	comps.run("kube-apiserver", func(ctx context.Context) error {
		return runAPIServer(ctx, ln, apiserverArgs(cfg.Dir, etcd.url, port, p, svc, verbosity))
	})
	client, err := clientFor(kubeconfig)
	if err != nil {
		return err
	}
	if err := waitReadyz(ctx, client, comps.errs); err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	logger.Info("kube-apiserver ready", "server", server)

	comps.run("kube-controller-manager", func(ctx context.Context) error {
		return runControllerManager(ctx, append(controllerManagerArgs(kubeconfig, p, verbosity), clientLimitArgs(cfg.ComponentQPS)...))
	})
	comps.run("kube-scheduler", func(ctx context.Context) error {
		return runScheduler(ctx, append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0", verbosity},
			clientLimitArgs(cfg.ComponentQPS)...))
	})
	ready(Info{Kubeconfig: kubeconfig, Server: server, Etcd: etcd.url,
		KubernetesService: net.JoinHostPort(svc.clusterIP.String(), strconv.Itoa(servicePort))})

	select {
	case <-ctx.Done():
		err = nil
	case err = <-comps.errs:
	}
	logger.Info("stopping control plane")
	return err
}

// components are the control plane's components, each in a goroutine of
// its own until stop; errs gets the error of one that exits before.
type components struct {
	ctx    context.Context
	cancel context.CancelFunc
	errs   chan error
	wg     sync.WaitGroup
	logger *slog.Logger
}

func newComponents(ctx context.Context, logger *slog.Logger) *components {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &components{ctx: cctx, cancel: cancel, errs: make(chan error, 3), logger: logger}
}

func (c *components) run(name string, f func(context.Context) error) {
	c.wg.Go(func() {
		err := f(c.ctx)
		if c.ctx.Err() == nil {
			c.errs <- fmt.Errorf("%s exited: %w", name, errOrExit(err))
		}
	})
}

// stop ends every component and waits for them, bounded.
func (c *components) stop() {
	c.cancel()
	waitBounded(&c.wg, c.logger)
}

// controllerManagerArgs are kube-controller-manager's flags: the
// ServiceAccount token controller signs with the PKI's key and publishes
// its CA (kube-root-ca.crt).
func controllerManagerArgs(kubeconfig string, p *pki, verbosity string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + Controllers,
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--use-service-account-credentials=false",
		verbosity,
	}
}

// clientLimitArgs are the flags that set a component's apiserver client
// rate to qps (burst twice that); none for qps <= 0.
func clientLimitArgs(qps float64) []string {
	if qps <= 0 {
		return nil
	}
	return []string{"--kube-api-qps=" + strconv.FormatFloat(qps, 'f', -1, 64), "--kube-api-burst=" + strconv.Itoa(int(2*qps))}
}

// apiserverArgs are kube-apiserver's flags: on loopback with the PKI's
// certificates, ServiceAccount tokens signed and checked with its key
// (TokenRequest: the kubelet's projected tokens), Node and RBAC
// authorization, and the Service network's range.
func apiserverArgs(dir, etcdURL string, port int, p *pki, svc serviceNet, verbosity string) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saKey,
		"--service-account-signing-key-file=" + p.saKey,
		"--authorization-mode=Node,RBAC",
		// As kubeadm, k0s and the cloud providers' clusters run it: the
		// provisioner is privileged (Bidirectional mounts need it), and
		// so are most CNI plugins' DaemonSets.
		"--allow-privileged=true",
		// kubectl exec and logs: the apiserver dials a node's kubelet
		// at its InternalIP (its name resolves nowhere here) with a
		// client certificate the kubelet checks against the CA.
		"--kubelet-client-certificate=" + p.kubeletClientCert,
		"--kubelet-client-key=" + p.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP",
		// Its first address is the kubernetes Service's ClusterIP.
		"--service-cluster-ip-range=" + svc.cidr.String(),
		// A loopback advertise address is no valid endpoint.
		"--endpoint-reconciler-type=none",
		verbosity,
	}
}

// pkiAndListener returns the PKI and the apiserver's listener: those of
// an earlier run when kubeconfig exists (the same certificates, the same
// address), else a new PKI, a free port and a kubeconfig written for it.
func pkiAndListener(pkiDir, kubeconfig string, logger *slog.Logger) (*pki, net.Listener, error) {
	if _, err := os.Stat(kubeconfig); err == nil {
		p, err := loadPKI(pkiDir)
		if err != nil {
			return nil, nil, fmt.Errorf("resuming the control plane: %w", err)
		}
		kc, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("resuming the control plane: %w", err)
		}
		cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
		u, err := url.Parse(cluster.Server)
		if err != nil {
			return nil, nil, fmt.Errorf("resuming the control plane: server %q: %w", cluster.Server, err)
		}
		ln, err := listenRetry(u.Host)
		if err != nil {
			return nil, nil, fmt.Errorf("apiserver listener on the earlier address: %w", err)
		}
		logger.Info("resuming an earlier control plane", "server", cluster.Server)
		return p, ln, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver listener: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// The serving certificate names the kubernetes Service's ClusterIP,
	// which in-cluster clients dial.
	p, err := newPKI(pkiDir, net.IP(serviceNetFor(port).clusterIP.AsSlice()))
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	if err := p.writeKubeconfig(kubeconfig, "admin", server); err != nil {
		ln.Close()
		return nil, nil, err
	}
	return p, ln, nil
}

// listenRetry listens on addr, retrying for a few seconds while the
// earlier process's socket is being released.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

func errOrExit(err error) error {
	if err == nil {
		return errors.New("returned without error")
	}
	return err
}

// waitBounded waits for the components, at most shutdownWait: the process
// ends right after, which releases whatever a component still holds.
func waitBounded(wg *sync.WaitGroup, logger *slog.Logger) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownWait):
		logger.Warn("components still running after stop", "waited", shutdownWait)
	}
}

func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return kubernetes.NewForConfig(cfg)
}

func waitReadyz(ctx context.Context, client kubernetes.Interface, errs <-chan error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-errs:
			return false, err
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return true, nil
		}
		last = err
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver /readyz (last: %v): %w", last, err)
	}
	return nil
}

func parseFlags(name string, sets map[string]*pflag.FlagSet, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, s := range sets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s flags: %w", name, err)
	}
	return nil
}

// runAPIServer is the kube-apiserver command's RunE without its signal
// handler, serving on ln.
func runAPIServer(ctx context.Context, ln net.Listener, args []string) error {
	s := apiserveroptions.NewServerRunOptions()
	if err := parseFlags("kube-apiserver", s.Flags().FlagSets, args); err != nil {
		return err
	}
	s.SecureServing.Listener = ln
	registry := s.GenericServerRunOptions.ComponentGlobalsRegistry
	if err := registry.Set(); err != nil {
		return fmt.Errorf("kube-apiserver feature gates: %w", err)
	}
	if err := logsapi.ValidateAndApply(s.Logs, registry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
		return fmt.Errorf("kube-apiserver logging: %w", err)
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return fmt.Errorf("kube-apiserver options: %w", errors.Join(errs...))
	}
	return apiserverapp.Run(ctx, completed)
}

// runControllerManager is the kube-controller-manager command's RunE, driven
// by ctx instead of context.Background.
func runControllerManager(ctx context.Context, args []string) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("kube-controller-manager options: %w", err)
	}
	known, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	nfs := s.Flags(known, disabled, aliases)
	s.ParsedFlags = &nfs
	if err := parseFlags("kube-controller-manager", nfs.FlagSets, args); err != nil {
		return err
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("kube-controller-manager feature gates: %w", err)
	}
	if err := logsapi.ValidateAndApply(s.Logs, utilfeature.DefaultFeatureGate); err != nil {
		return fmt.Errorf("kube-controller-manager logging: %w", err)
	}
	c, err := s.Config(ctx, known, disabled, aliases)
	if err != nil {
		return fmt.Errorf("kube-controller-manager config: %w", err)
	}
	return kcmapp.Run(ctx, c.Complete())
}

// runScheduler drives the scheduler through options + Setup + Run: its
// cobra command installs a second signal handler, which panics.
func runScheduler(ctx context.Context, args []string) error {
	opts := schedoptions.NewOptions()
	if err := parseFlags("kube-scheduler", opts.Flags.FlagSets, args); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("kube-scheduler feature gates: %w", err)
	}
	if err := logsapi.ValidateAndApply(opts.Logs, opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
		return fmt.Errorf("kube-scheduler logging: %w", err)
	}
	name, err := cache.NewInformerName("kube-scheduler")
	if err != nil {
		return fmt.Errorf("kube-scheduler informer name: %w", err)
	}
	opts.InformerName = name
	cc, sched, err := schedapp.Setup(ctx, opts)
	if err != nil {
		return fmt.Errorf("kube-scheduler setup: %w", err)
	}
	return schedapp.Run(ctx, cc, sched)
}
