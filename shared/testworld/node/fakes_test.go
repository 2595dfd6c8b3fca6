package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/netdra/netdra/shared/testworld/node"
	"github.com/netdra/netdra/shared/testworld/worldtest"
)

// journal records what the driver and the NRI plugin were called with, in
// order, one line per call.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.lines)
}

// index is the position of the first line starting with prefix, or -1.
func (j *journal) index(prefix string) int {
	return slices.IndexFunc(j.all(), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

func (j *journal) count(prefix string) int {
	n := 0
	for _, l := range j.all() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// testDriver is a tiny DRA driver: a kubeletplugin.Helper publishing two
// devices for its node and recording every prepare and unprepare. It fails
// as many prepares as failPrepares says.
type testDriver struct {
	name         string
	journal      *journal
	failPrepares atomic.Int32
	helper       *kubeletplugin.Helper
}

var _ kubeletplugin.DRAPlugin = (*testDriver)(nil)

func (d *testDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	res := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		d.journal.add("prepare %s/%s %s", c.Namespace, c.Name, c.UID)
		if d.failPrepares.Add(-1) >= 0 {
			res[c.UID] = kubeletplugin.PrepareResult{Err: errors.New("injected prepare failure")}
			continue
		}
		var devs []kubeletplugin.Device
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == d.name {
				devs = append(devs, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
			}
		}
		res[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return res, nil
}

func (d *testDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	res := map[types.UID]error{}
	for _, c := range claims {
		d.journal.add("unprepare %s/%s %s", c.Namespace, c.Name, c.UID)
		res[c.UID] = nil
	}
	return res, nil
}

func (d *testDriver) HandleError(_ context.Context, err error, msg string) {
	d.journal.add("driver error %s: %v", msg, err)
}

func (d *testDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// startDriver starts the driver on n, waits until the node registered it
// and its ResourceSlice with two devices is published.
func startDriver(t *testing.T, client kubernetes.Interface, n *node.Node, j *journal) *testDriver {
	t.Helper()
	d := &testDriver{name: strings.ToLower(n.Name()) + ".example.com", journal: j}
	pluginDir := worldtest.TempDir(t)
	ctx := klog.NewContext(context.Background(), logr.FromSlogHandler(worldtest.Logger(t).With("driver", d.name).Handler()))
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.name),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(n.Name()),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.RegistrarDirectoryPath(n.RegistryDir()),
		kubeletplugin.GRPCVerbosity(100), // -1 does not silence it
	)
	if err != nil {
		t.Fatalf("starting driver %s: %v", d.name, err)
	}
	d.helper = h
	t.Cleanup(h.Stop)
	err = h.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		n.Name(): {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{{Name: "dev-0"}, {Name: "dev-1"}}}}},
	}})
	if err != nil {
		t.Fatalf("publishing resources: %v", err)
	}
	poll(t, "driver registered", func() bool { _, ok := n.Plugin(d.name); return ok })
	poll(t, "ResourceSlice published", func() bool {
		slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + d.name})
		return err == nil && len(slices.Items) == 1 && len(slices.Items[0].Spec.Devices) == 2
	})
	return d
}

// testPlugin is a tiny NRI plugin recording the pod sandbox events with
// the network namespace path, and whether that namespace existed when
// RunPodSandbox arrived. It fails as many RunPodSandbox as failRuns says
// (negative: all).
type testPlugin struct {
	journal  *journal
	failRuns atomic.Int32
	synced   chan struct{}
	once     sync.Once
}

var (
	_ stub.SynchronizeInterface = (*testPlugin)(nil)
	_ stub.RunPodInterface      = (*testPlugin)(nil)
	_ stub.StopPodInterface     = (*testPlugin)(nil)
	_ stub.RemovePodInterface   = (*testPlugin)(nil)
)

func (p *testPlugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	p.once.Do(func() { close(p.synced) })
	return nil, nil
}

func (p *testPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	path := netnsPath(pod)
	_, err := os.Stat(path)
	p.journal.add("RunPodSandbox %s %s exists=%v", pod.GetUid(), path, path != "" && err == nil)
	if n := p.failRuns.Load(); n != 0 {
		p.failRuns.Add(-1)
		return errors.New("injected RunPodSandbox failure")
	}
	return nil
}

func (p *testPlugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.journal.add("StopPodSandbox %s %s", pod.GetUid(), netnsPath(pod))
	return nil
}

func (p *testPlugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.journal.add("RemovePodSandbox %s %s", pod.GetUid(), netnsPath(pod))
	return nil
}

func netnsPath(pod *api.PodSandbox) string {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}

// startPlugin connects the plugin to n and waits until the runtime has
// synchronized it: from then on it gets every pod event.
func startPlugin(t *testing.T, n *node.Node, j *journal) *testPlugin {
	t.Helper()
	p := &testPlugin{journal: j, synced: make(chan struct{})}
	s, err := stub.New(p, stub.WithSocketPath(n.NRISocket()), stub.WithPluginName("twtest"), stub.WithPluginIdx("10"))
	if err != nil {
		t.Fatalf("NRI plugin: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("starting NRI plugin: %v", err)
	}
	t.Cleanup(s.Stop)
	select {
	case <-p.synced:
	case <-time.After(30 * time.Second):
		t.Fatal("NRI plugin not synchronized after 30s")
	}
	return p
}

// poll waits for cond, failing the test after a minute.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
