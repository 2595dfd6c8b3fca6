package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NetnsDir is where named network namespaces are bind-mounted, as by
// `ip netns add`.
const NetnsDir = "/var/run/netns"

// runtime is the container runtime's half of the node: the NRI adaptation
// that plugins connect to, and the pod sandboxes, each with its own named
// network namespace. It follows containerd's CRI plugin: the plugin sync is
// blocked around every sandbox event; a sandbox whose NRI RunPodSandbox
// fails has its namespace removed and gets no StopPodSandbox or
// RemovePodSandbox; a stop sends StopPodSandbox before the namespace goes.
type runtime struct {
	nri       *adaptation.Adaptation
	log       *slog.Logger
	prefix    string
	pluginDir string

	mu        sync.Mutex
	sandboxes map[string]*sandbox // by sandbox ID
	byPod     map[types.UID]*sandbox
}

// sandbox is one pod sandbox.
type sandbox struct {
	id      string
	podUID  types.UID
	netns   string // name under NetnsDir; empty for hostNetwork pods
	nri     *api.PodSandbox
	stopped bool
}

func startRuntime(ctx context.Context, socket, prefix string, logger *slog.Logger) (*runtime, error) {
	// An empty plugin directory: pre-installed plugins would be executed.
	pluginDir, err := os.MkdirTemp("", "testworld-nri-")
	if err != nil {
		return nil, fmt.Errorf("NRI plugin dir: %w", err)
	}
	r := &runtime{log: logger, prefix: prefix, pluginDir: pluginDir, sandboxes: map[string]*sandbox{}, byPod: map[types.UID]*sandbox{}}
	r.nri, err = adaptation.New("testworld", RuntimeVersion, r.synchronize, r.update,
		adaptation.WithSocketPath(socket),
		adaptation.WithPluginPath(pluginDir),
		adaptation.WithPluginConfigPath(pluginDir),
	)
	if err != nil {
		os.RemoveAll(pluginDir)
		return nil, fmt.Errorf("NRI runtime: %w", err)
	}
	if err := r.nri.Start(); err != nil {
		os.RemoveAll(pluginDir)
		return nil, fmt.Errorf("NRI runtime on %s: %w", socket, err)
	}
	return r, nil
}

// synchronize hands a connecting plugin every sandbox that exists. No
// container runs, so there are none to report and no updates to apply.
func (r *runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	r.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		pods = append(pods, sb.nri)
	}
	r.mu.Unlock()
	slices.SortFunc(pods, func(a, b *api.PodSandbox) int { return compareStrings(a.Id, b.Id) })
	_, err := cb(ctx, pods, nil)
	return err
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// update refuses the container updates a plugin asks for on its own: there
// are no containers to update.
func (r *runtime) update(_ context.Context, updates []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
	return updates, nil
}

// run creates the pod's network namespace and sends RunPodSandbox to the
// NRI plugins. On failure nothing of the sandbox is left.
func (r *runtime) run(ctx context.Context, pod *corev1.Pod) (*sandbox, error) {
	sb := &sandbox{id: newSandboxID(), podUID: pod.UID}
	if !pod.Spec.HostNetwork {
		sb.netns = r.prefix + string(pod.UID)
		if err := createNetns(sb.netns); err != nil {
			return nil, err
		}
	}
	sb.nri = nriPod(sb, pod)

	defer r.nri.BlockPluginSync().Unblock()
	if err := r.nri.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: sb.nri}); err != nil {
		if derr := deleteNetns(sb.netns); derr != nil {
			r.log.Warn("removing the network namespace of a failed sandbox", "netns", sb.netns, "err", derr)
		}
		return nil, fmt.Errorf("NRI RunPodSandbox failed: %w", err)
	}
	r.mu.Lock()
	r.sandboxes[sb.id] = sb
	r.byPod[sb.podUID] = sb
	r.mu.Unlock()
	return sb, nil
}

// stopAndRemove sends StopPodSandbox (once), removes the network namespace
// and sends RemovePodSandbox. Plugin errors are logged, as containerd logs
// them; an error removing the namespace is returned and the call can be
// repeated.
func (r *runtime) stopAndRemove(ctx context.Context, sb *sandbox) error {
	block := r.nri.BlockPluginSync()
	defer block.Unblock()
	if !sb.stopped {
		if err := r.nri.StopPodSandbox(ctx, &adaptation.StopPodSandboxRequest{Pod: sb.nri}); err != nil {
			r.log.Warn("NRI StopPodSandbox failed", "pod", sb.nri.Namespace+"/"+sb.nri.Name, "err", err)
		}
		sb.stopped = true
	}
	if err := deleteNetns(sb.netns); err != nil {
		return err
	}
	if err := r.nri.RemovePodSandbox(ctx, &adaptation.RemovePodSandboxRequest{Pod: sb.nri}); err != nil {
		r.log.Warn("NRI RemovePodSandbox failed", "pod", sb.nri.Namespace+"/"+sb.nri.Name, "err", err)
	}
	r.mu.Lock()
	delete(r.sandboxes, sb.id)
	if r.byPod[sb.podUID] == sb {
		delete(r.byPod, sb.podUID)
	}
	r.mu.Unlock()
	return nil
}

func (r *runtime) sandboxOf(pod types.UID) *sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byPod[pod]
}

// stop tears down every sandbox and stops the NRI runtime side.
func (r *runtime) stop(ctx context.Context) error {
	r.mu.Lock()
	var all []*sandbox
	for _, sb := range r.sandboxes {
		all = append(all, sb)
	}
	r.mu.Unlock()
	var errs []error
	for _, sb := range all {
		errs = append(errs, r.stopAndRemove(ctx, sb))
	}
	r.nri.Stop()
	errs = append(errs, os.RemoveAll(r.pluginDir))
	return errors.Join(errs...)
}

// nriPod describes the sandbox as containerd does: the pod's identity,
// its labels (with the kubelet's io.kubernetes.pod.* ones) and
// annotations, and its Linux namespaces with the network one's path.
func nriPod(sb *sandbox, pod *corev1.Pod) *api.PodSandbox {
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels["io.kubernetes.pod.name"] = pod.Name
	labels["io.kubernetes.pod.namespace"] = pod.Namespace
	labels["io.kubernetes.pod.uid"] = string(pod.UID)
	annotations := map[string]string{}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	namespaces := []*api.LinuxNamespace{{Type: "ipc"}, {Type: "uts"}}
	if sb.netns != "" {
		namespaces = append([]*api.LinuxNamespace{{Type: "network", Path: filepath.Join(NetnsDir, sb.netns)}}, namespaces...)
	}
	handler := ""
	if pod.Spec.RuntimeClassName != nil {
		handler = *pod.Spec.RuntimeClassName
	}
	return &api.PodSandbox{
		Id:             sb.id,
		Name:           pod.Name,
		Uid:            string(pod.UID),
		Namespace:      pod.Namespace,
		Labels:         labels,
		Annotations:    annotations,
		RuntimeHandler: handler,
		Linux:          &api.LinuxPodSandbox{Namespaces: namespaces},
	}
}

// newSandboxID returns 64 hex digits, the form of containerd's IDs.
func newSandboxID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createNetns makes a named network namespace the way `ip netns add` does:
// a new namespace bind-mounted on NetnsDir/name. The namespace switch
// happens on a locked thread of a goroutine that exits without unlocking
// it, so the thread is discarded whatever namespace it ends up in.
func createNetns(name string) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		ns, err := netns.NewNamed(name)
		if err != nil {
			errc <- fmt.Errorf("creating network namespace %s: %w", name, err)
			return
		}
		ns.Close()
		errc <- nil
	}()
	return <-errc
}

// deleteNetns unmounts and removes a named network namespace; a missing
// one is no error.
func deleteNetns(name string) error {
	if name == "" {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(NetnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("deleting network namespace %s: %w", name, err)
	}
	return nil
}
