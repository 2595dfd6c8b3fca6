// Command operator is netdra's cluster-wide configuration operator: from
// each ClusterConfig it generates a NodeConfig for every node the
// ClusterConfig governs, reports conflicts between ClusterConfigs in their
// status, and deletes the NodeConfigs it generated that no ClusterConfig
// assigns any more. It runs as a Deployment; replicas take turns through a
// Lease. See package plan for the rules.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/shared/process"
)

type config struct {
	Kubeconfig string
	KubeQPS    float64
	KubeBurst  int
	LogLevel   slog.Level
	LogFormat  process.LogFormat
	controller.Options
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", 50, "queries per second to the apiserver (client-side rate limit): a ClusterConfig change writes the NodeConfig of every node it governs")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", 100, "burst of queries to the apiserver above -kube-api-qps")
	fs.TextVar(&c.LogLevel, "log-level", slog.LevelInfo, "minimum log level: debug, info, warn, error")
	fs.TextVar(&c.LogFormat, "log-format", process.LogJSON, "log line format: json or text")
	fs.DurationVar(&c.Refresh, "refresh", controller.DefaultRefresh, "period of the full re-check, independent of watch events")
	fs.BoolVar(&c.LeaderElection, "leader-elect", true, "take turns with other replicas through a Lease")
	fs.StringVar(&c.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease; empty is the pod's own")
	fs.StringVar(&c.LeaderElectionID, "leader-election-id", "netdra-operator", "name of the Lease")
	fs.DurationVar(&c.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a Lease lasts without renewal")
	fs.DurationVar(&c.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader tries to renew before giving up")
	fs.DurationVar(&c.RetryPeriod, "leader-election-retry-period", 2*time.Second, "interval between attempts to acquire or renew")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "127.0.0.1:8080", `address of the Prometheus metrics endpoint; "0" disables it`)
	fs.StringVar(&c.HealthAddr, "health-addr", "127.0.0.1:8081", `address of /healthz and /readyz; "" disables them`)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run returns the exit code: 0 on a clean shutdown, 1 on an error, 2 on
// bad flags.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	var cfg config
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	cfg.register(fs)
	if code, ok := process.ParseArgs(fs, args, stderr); !ok {
		return code
	}
	log := process.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	// client-go logs through klog and controller-runtime through its
	// global logger: both go to the same slog handler.
	klog.SetSlogLogger(log)
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	// How long the client's requests take and wait for its rate limiter,
	// on the metrics endpoint beside the request counts.
	ctrlmetrics.RegisterRESTClientMetrics(ctrlmetrics.MetricRequestLatency, ctrlmetrics.MetricRateLimiterLatency)
	if err := cfg.run(ctx, log); err != nil {
		log.Error("Exiting", "error", err)
		return 1
	}
	return 0
}

func (c *config) run(ctx context.Context, log *slog.Logger) error {
	if c.KubeQPS <= 0 || c.KubeBurst <= 0 {
		return fmt.Errorf("-kube-api-qps %v and -kube-api-burst %d: both must be positive", c.KubeQPS, c.KubeBurst)
	}
	rc, err := restConfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(c.KubeQPS), c.KubeBurst
	log.Info("Starting", "host", rc.Host, "refresh", c.Refresh, "leaderElection", c.LeaderElection,
		"lease", c.LeaderElectionNamespace+"/"+c.LeaderElectionID)
	return controller.Run(ctx, log, rc, c.Options)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (pass -kubeconfig outside a cluster): %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}
