// Command dra is netdra's DRA kubelet plugin: it registers with the
// kubelet, follows the node's NodeConfig, copies the provisioner's
// inventory into the state service, publishes ResourceSlices, and prepares
// and unprepares claims. It needs the kubelet plugin directories and its
// Kubernetes credentials; it touches no device itself.
//
// `dra sockets` is the holder of dra's kubelet sockets (package sockkeep),
// run beside dra and never restarted with it; dra takes the sockets from
// it with -keep-sockets.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"k8s.io/klog/v2"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/agent"
	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/dra/counters"
	"github.com/netdra/netdra/services/dra/drametrics"
	"github.com/netdra/netdra/services/dra/sockkeep"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/process/metrics"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	NodeName     string
	Kubeconfig   string
	Peers        process.Peers
	PluginDir    string
	RegistrarDir string
	KeepSockets  string
	CDIDir       string
	NetnsHook    string
	GateSocket   string
	Metrics      string
	Debounce     time.Duration
	KubeQPS      float64
	KubeBurst    int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sockets" {
		os.Exit(sockkeep.Main(os.Args[2:], os.Stderr))
	}
	var cfg config
	fs := flag.NewFlagSet("dra", flag.ContinueOnError)
	cfg.Register(fs, "dra")
	cfg.Inspect = func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
		return drav1.NewDraServiceClient(cc).Status(ctx, &drav1.StatusRequest{})
	}
	fs.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster)")
	cfg.Peers.Register(fs)
	fs.StringVar(&cfg.PluginDir, "plugin-dir", "/var/lib/kubelet/plugins", "parent of the kubelet plugin's data directory (<dir>/<driver>)")
	fs.StringVar(&cfg.RegistrarDir, "registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory")
	fs.StringVar(&cfg.KeepSockets, "keep-sockets", "", "the handover socket of the socket holder (dra sockets), which holds the kubelet plugin and registration sockets across dra's restarts; empty: dra creates and removes them itself")
	fs.StringVar(&cfg.CDIDir, "cdi-dir", cdispec.DefaultDir, "the CDI spec directory the container runtime reads, for the claims' and the device metadata specs; empty: no CDI")
	fs.StringVar(&cfg.NetnsHook, "netns-hook", "", "the netdra-hook binary's path on the host, a CDI hook that keeps a container from starting without its devices; empty: none. Needs -cdi-dir")
	fs.StringVar(&cfg.GateSocket, "gate-socket", "", "nri's gate socket as the host sees it (nri's -gate-socket): the -netns-hook waits there for the pod's devices, refusing the container when nri is down; empty: the hook only checks the netns")
	fs.StringVar(&cfg.Metrics, "metrics-address", "127.0.0.1:9651", "where to serve Prometheus metrics (empty: nowhere)")
	fs.Float64Var(&cfg.KubeQPS, "kube-api-qps", 50, "queries per second to the apiserver (client-side rate limit; the kubelet's default)")
	fs.IntVar(&cfg.KubeBurst, "kube-api-burst", 100, "burst of queries to the apiserver above -kube-api-qps")
	fs.DurationVar(&cfg.Debounce, "publish-debounce", 200*time.Millisecond, "the longest a burst of changes is gathered into one publication, and the shortest time between two")
	os.Exit(process.Main(fs, os.Args[1:], &cfg.Flags, func(ctx context.Context, log *slog.Logger) error {
		return run(ctx, log, &cfg)
	}))
}

// builtinTypes is rc for the clientset of Kubernetes' own types, which
// speaks protobuf to the apiserver, as the kubelet does: decoding the
// ResourceSlice watch and the claims and pods of every prepare, and
// encoding the slices written, costs a fraction of JSON's time and
// garbage. The dynamic client (netdra's CRDs, which have no protobuf)
// keeps rc's JSON.
func builtinTypes(rc *rest.Config) *rest.Config {
	rc = rest.CopyConfig(rc)
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return rc
}

func run(ctx context.Context, log *slog.Logger, cfg *config) error {
	// client-go and the kubelet plugin library log through klog: their
	// lines go through dra's logger, in its format and at its level.
	klog.SetSlogLogger(log)
	if cfg.NodeName == "" {
		return errors.New("-node-name (or $NODE_NAME) is required")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// client-go's default rate limit makes back-to-back prepares wait on
	// the client rather than the apiserver (bench/RESULTS.md).
	rc.QPS, rc.Burst = float32(cfg.KubeQPS), cfg.KubeBurst
	kc, err := kubernetes.NewForConfig(builtinTypes(rc))
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	state, prov, closeConns, err := cfg.Peers.Dial()
	if err != nil {
		return err
	}
	defer closeConns()
	peers := cfg.Peers.Watch(ctx, log, state, prov)
	reg := metrics.NewRegistry()
	reg.MustRegister(counters.New(log.With("component", "counters"), provisionerv1.NewProvisionerServiceClient(prov),
		statev1.NewStateServiceClient(state), &counters.KubePods{Kube: kc, NodeName: cfg.NodeName}))
	serveMetrics, err := metrics.Serve(cfg.Metrics, reg, log)
	if err != nil {
		return err
	}
	a := agent.New(agent.Config{NodeName: cfg.NodeName, Kube: kc, Dynamic: dc,
		State: statev1.NewStateServiceClient(state), Provisioner: provisionerv1.NewProvisionerServiceClient(prov),
		PluginDir: cfg.PluginDir, RegistrarDir: cfg.RegistrarDir, KeepSockets: cfg.KeepSockets, CDIDir: cfg.CDIDir, NetnsHook: cfg.NetnsHook, GateSocket: cfg.GateSocket, Debounce: cfg.Debounce,
		Metrics: drametrics.New(reg), Logger: log, Waiting: peers.Waiting})

	srv := rpc.NewServer(metrics.NewGRPC(reg).Server(cfg.ServerConfig(log)))
	drav1.RegisterDraServiceServer(srv.GRPC(), a)
	srv.SetServing(drav1.DraService_ServiceDesc.ServiceName, true)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	agentActor := process.Actor{Execute: func() error { return a.Run(ctx) }, Interrupt: func(error) { cancel() }}
	log.Info("Serving", "socket", cfg.Socket, "node", cfg.NodeName)
	return process.RunServer(ctx, log, srv, agentActor, serveMetrics)
}
