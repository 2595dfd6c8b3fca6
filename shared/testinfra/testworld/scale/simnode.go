package scale

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/agent"
	"github.com/netdra/netdra/services/dra/drametrics"
	"github.com/netdra/netdra/services/state/api"
	"github.com/netdra/netdra/services/state/store"
)

// simNode is one simulated node's dra: netdra's real agent (NodeConfig
// watcher and status writer, inventory pump, slice publisher, claim
// recovery, kubelet plugin helper) with its own HTTP transport to the
// apiserver, so its own connection and watches, over the node's own real
// state service (in memory, over an in-process gRPC connection) and a fake
// provisioner that serves a fixed inventory. A loop in the place of the
// kubelet's plugin watcher registers the plugin; nothing calls its DRA
// service (no kubelet runs pods).
type simNode struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	srv    *grpc.Server
	conn   *grpc.ClientConn
	store  *store.Store
}

// startNode starts the simulated dra of node under dir (which it creates;
// its sockets go there, so it must be short). rc is the apiserver's
// configuration, copied.
func startNode(ctx context.Context, log *slog.Logger, rc *rest.Config, node, dir string, inventory []*devicev1.Device) (*simNode, error) {
	pluginDir, regDir := filepath.Join(dir, "p"), filepath.Join(dir, "r")
	for _, d := range []string{pluginDir, regDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	st, err := store.Open(filepath.Join(dir, "state.db"), log)
	if err != nil {
		return nil, fmt.Errorf("node %s: state store: %w", node, err)
	}
	// A small pipe: each connection holds two buffers of this size, in
	// every simulated node, and a gRPC message larger than it streams
	// through.
	lis := bufconn.Listen(64 << 10)
	srv := grpc.NewServer()
	statev1.RegisterStateServiceServer(srv, api.New(st))
	provisionerv1.RegisterProvisionerServiceServer(srv, newFakeProvisioner(inventory))
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+node,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		_ = st.Close()
		return nil, err
	}
	kc, dc, err := nodeClients(rc, node)
	if err != nil {
		srv.Stop()
		_ = st.Close()
		return nil, err
	}
	a := agent.New(agent.Config{NodeName: node, Kube: kc, Dynamic: dc,
		State: statev1.NewStateServiceClient(conn), Provisioner: provisionerv1.NewProvisionerServiceClient(conn),
		PluginDir: pluginDir, RegistrarDir: regDir, Debounce: 200 * time.Millisecond,
		Metrics: drametrics.New(prometheus.NewRegistry()), Logger: log.With("node", node)})
	ctx, cancel := context.WithCancel(ctx)
	n := &simNode{name: node, cancel: cancel, done: make(chan struct{}), srv: srv, conn: conn, store: st}
	var wg sync.WaitGroup
	wg.Go(func() { registerPlugins(ctx, regDir) })
	go func() {
		defer close(n.done)
		n.err = a.Run(ctx)
		wg.Wait()
	}()
	return n, nil
}

// stop ends the node's dra and its services.
func (n *simNode) stop() {
	n.cancel()
	<-n.done
	_ = n.conn.Close()
	n.srv.Stop()
	_ = n.store.Close()
}

// nodeClients are dra's clients as its main makes them (Kubernetes' types
// in protobuf, netdra's CRDs through the dynamic client in JSON), on one
// HTTP transport of the node's own: each simulated node has its own
// connection to the apiserver, as each real node's dra has.
func nodeClients(rc *rest.Config, node string) (kubernetes.Interface, dynamic.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 50, 100 // dra's defaults (-kube-api-qps, -kube-api-burst)
	rc.UserAgent = "netdra-dra/" + node
	// A Dial of its own keeps client-go from sharing one cached transport
	// between the nodes.
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	rc.Dial = dialer.DialContext
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, nil, err
	}
	pb := rest.CopyConfig(rc)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kc, err := kubernetes.NewForConfigAndClient(pb, hc)
	if err != nil {
		return nil, nil, err
	}
	dc, err := dynamic.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, nil, err
	}
	return kc, dc, nil
}

// registerPlugins does what the kubelet's plugin watcher does with a
// registration socket that appears in dir: GetInfo, then
// NotifyRegistrationStatus registered. A socket made again (a new
// registration attempt, a new driver name) is registered again. Like the
// kubelet's, it learns of sockets through inotify, so a socket is
// registered as soon as it appears and N idle watchers cost nothing: the
// folder is read again only at an event of it, and registerRetry after a
// socket did not answer yet. Without inotify it is read every
// registerRetry.
func registerPlugins(ctx context.Context, dir string) {
	seen := map[string]time.Time{}
	events, unwatch := dirEvents(dir)
	defer unwatch()
	for {
		var retry <-chan time.Time
		if events == nil {
			retry = time.After(registerRetry)
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), "-reg.sock") {
				continue
			}
			info, err := e.Info()
			if err != nil || seen[e.Name()].Equal(info.ModTime()) {
				continue
			}
			if registerPlugin(ctx, filepath.Join(dir, e.Name())) == nil {
				seen[e.Name()] = info.ModTime()
			} else if retry == nil {
				retry = time.After(registerRetry) // not serving yet
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-events:
		case <-retry:
		}
	}
}

// registerRetry is how soon registerPlugins reads its folder again after
// a socket did not answer, and how often without inotify.
const registerRetry = 100 * time.Millisecond

// folderWatch is the one inotify instance every simulated node's
// registerPlugins shares: a user has few (fs.inotify.max_user_instances),
// fewer than a large simulation's nodes, and each folder is a watch of it
// instead. A node that got no instance of its own would poll its folder,
// a load the kubelet it stands for does not make.
var folderWatch struct {
	once sync.Once
	w    *fsnotify.Watcher
	mu   sync.Mutex
	subs map[string]chan struct{} // folder -> its registerPlugins
}

// dirEvents returns a channel that receives after each inotify event of
// dir (events coalesce while one is pending), and unwatch, which stops
// them; the channel is nil when inotify cannot watch dir.
func dirEvents(dir string) (<-chan struct{}, func()) {
	fw := &folderWatch
	fw.once.Do(func() {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return
		}
		fw.w, fw.subs = w, map[string]chan struct{}{}
		go func() {
			for {
				select {
				case ev, ok := <-w.Events:
					if !ok {
						return
					}
					fw.mu.Lock()
					ch := fw.subs[filepath.Dir(ev.Name)]
					fw.mu.Unlock()
					select {
					case ch <- struct{}{}:
					default:
					}
				case _, ok := <-w.Errors:
					if !ok {
						return
					}
				}
			}
		}()
	})
	if fw.w == nil {
		return nil, func() {}
	}
	// An event before the channel is in place is not missed: the caller
	// reads the folder after this returns.
	if fw.w.Add(dir) != nil {
		return nil, func() {}
	}
	ch := make(chan struct{}, 1)
	fw.mu.Lock()
	fw.subs[dir] = ch
	fw.mu.Unlock()
	return ch, func() {
		_ = fw.w.Remove(dir)
		fw.mu.Lock()
		delete(fw.subs, dir)
		fw.mu.Unlock()
	}
}

func registerPlugin(ctx context.Context, sock string) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := registerapi.NewRegistrationClient(conn)
	if _, err := c.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		return err
	}
	_, err = c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	return err
}
