package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/crds"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// repoRoot is the repository, relative to this package.
const repoRoot = "../../../.."

// installer runs docs/install.md's "Installing on a cluster" commands
// against the test world: kubectl v1.37.2 (built from k8s.io/kubernetes
// with the real node), make, ctr and grpcurl, as a platform engineer
// would.
type installer struct {
	cp      *controlplane.ControlPlane
	node    *realnode.Node
	repo    string // the repository, absolute
	kubectl string
	ctr     string
	dir     string // the user's overlay (my-netdra), the test's manifests
	ports   [4]int // dra's, nri's, state's and the provisioner's metrics ports on the node
	ns      string // the namespace netdra is installed into
}

func newInstaller(t *testing.T, cp *controlplane.ControlPlane, n *realnode.Node) *installer {
	t.Helper()
	repo, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// The uninstall deletes the CRDs from the control plane the package's
	// tests share: put them back for the tests after this one (registered
	// first, so it runs last, after the uninstall).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := crds.Install(ctx, cp.RESTConfig(), filepath.Join(repo, "pods/chart/netdra/files/crds")); err != nil {
			t.Errorf("installing the CRDs again after the uninstall: %v", err)
		}
	})
	b := worldtest.Binaries(t)
	in := &installer{cp: cp, node: n, repo: repo, kubectl: b.Kubectl(), ctr: b.Ctr(), dir: worldtest.TempDir(t), ns: "netdra-system"}
	for i := range in.ports {
		in.ports[i] = testenv.FreePort(t)
	}
	return in
}

// run runs a command in the installer's dir with the world's KUBECONFIG
// and returns its output; it fails the test when the command fails.
func (in *installer) run(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := in.try(timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func (in *installer) try(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = in.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+in.cp.Kubeconfig())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// k runs kubectl.
func (in *installer) k(t *testing.T, args ...string) string {
	t.Helper()
	return in.run(t, 4*time.Minute, in.kubectl, args...)
}

// loadImages is docs/install.md's `make images-load` with the real node's ctr
// and containerd socket: make images builds the five OCI archives, ctr
// imports them into the node's containerd.
func (in *installer) loadImages(t *testing.T, tag string) {
	t.Helper()
	t0 := time.Now()
	out := in.run(t, 15*time.Minute, "make", "-C", in.repo, "images-load", "IMAGE_PREFIX=localhost/netdra", "IMAGE_TAG="+tag,
		"CTR="+in.ctr, "CONTAINERD_SOCKET="+in.node.ContainerdSocket())
	t.Logf("make images-load IMAGE_TAG=%s: %s", tag, time.Since(t0).Round(time.Millisecond))
	for _, s := range services {
		if !strings.Contains(out, "localhost/netdra/"+s+":"+tag) {
			t.Errorf("make images-load imported no localhost/netdra/%s:%s:\n%s", s, tag, out)
		}
	}
}

var services = []string{"provisioner", "state", "dra", "nri", "operator"}

// writeOverlay writes docs/install.md's overlay (my-netdra/kustomization.yaml:
// the base, the images by the local name and tag) plus what this node
// differs in from a default one, as a JSON patch: its kubelet's root dir
// and NRI socket are under the node's directory (the DaemonSet's host
// paths, dra's mount paths and flags follow), the state directory is the
// node's too (removed with it), so are the CDI spec directory its
// containerd reads, the holder's sockets, the take-over locks and nri's
// gate socket (the flags that name it follow), and the metrics ports are
// free ones (other tests' nodes run beside this one).
func (in *installer) writeOverlay(t *testing.T, tag string) string {
	t.Helper()
	dir := filepath.Join(in.dir, "my-netdra")
	// kustomize takes no absolute path for a base: relative to the overlay.
	rel, err := filepath.Rel(dir, filepath.Join(in.repo, "pods/base"))
	if err != nil {
		t.Fatal(err)
	}
	var k strings.Builder
	fmt.Fprintf(&k, "resources:\n  - %s\nimages:\n", rel)
	for _, s := range services {
		fmt.Fprintf(&k, "  - {name: ghcr.io/netdra/%s, newName: localhost/netdra/%s, newTag: %s}\n", s, s, tag)
	}
	k.WriteString("patches:\n")
	for _, ds := range []string{"netdra-node", "netdra-sockets"} {
		fmt.Fprintf(&k, "  - target: {kind: DaemonSet, name: %s}\n    path: %s-paths.yaml\n", ds, ds)
		write(t, filepath.Join(dir, ds+"-paths.yaml"), in.nodePatch(t, in.baseDaemonSet(t, ds)))
	}
	write(t, filepath.Join(dir, "kustomization.yaml"), k.String())
	return dir
}

// nodePatch is the JSON patch of ds (a DaemonSet of the base as kubectl
// kustomize renders it) for this node's paths, found by name.
func (in *installer) nodePatch(t *testing.T, ds *appsv1.DaemonSet) string {
	t.Helper()
	spec := &ds.Spec.Template.Spec
	kubelet, stateDir := in.node.KubeletDir(), filepath.Join(in.node.Dir(), "netdra-state")
	gateDir := filepath.Join(in.node.Dir(), "netdra-gate")
	var ops []string
	op := func(path, value string) {
		ops = append(ops, fmt.Sprintf("- {op: replace, path: %s, value: %q}", path, value))
	}
	for i, v := range spec.Volumes {
		switch v.Name {
		case "kubelet-plugin":
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), kubelet+"/plugins/netdra.io")
		case "kubelet-registry":
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), kubelet+"/plugins_registry")
		case "nri":
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), in.node.NRIDir())
		case "state-db":
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), stateDir)
		case "cdi-specs": // the CDI directory this node's containerd reads
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), in.node.CDIDir())
		case "sockets-holder": // this node's, apart from other worlds' on the host
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), filepath.Join(in.node.Dir(), "netdra-holder"))
		case "take-over-locks": // this node's: another world's node pod is not this one's predecessor
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), filepath.Join(in.node.Dir(), "netdra-lock"))
		case "nri-gate": // this node's: another world's nri serves the host's
			op(fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i), gateDir)
		}
	}
	for ci, c := range spec.Containers {
		for mi, m := range c.VolumeMounts {
			switch m.Name {
			case "kubelet-plugin":
				op(fmt.Sprintf("/spec/template/spec/containers/%d/volumeMounts/%d/mountPath", ci, mi), kubelet+"/plugins/netdra.io")
			case "kubelet-registry":
				op(fmt.Sprintf("/spec/template/spec/containers/%d/volumeMounts/%d/mountPath", ci, mi), kubelet+"/plugins_registry")
			case "nri-gate": // the hooks runc runs on the host reach it at the host's path
				op(fmt.Sprintf("/spec/template/spec/containers/%d/volumeMounts/%d/mountPath", ci, mi), gateDir)
			}
		}
		for ai, a := range c.Args {
			flag, _, _ := strings.Cut(a, "=")
			switch {
			case flag == "-plugin-dir":
				op(fmt.Sprintf("/spec/template/spec/containers/%d/args/%d", ci, ai), "-plugin-dir="+kubelet+"/plugins")
			case flag == "-registrar-dir":
				op(fmt.Sprintf("/spec/template/spec/containers/%d/args/%d", ci, ai), "-registrar-dir="+kubelet+"/plugins_registry")
			case flag == "-gate-socket": // nri's, and dra's for its netns hook
				op(fmt.Sprintf("/spec/template/spec/containers/%d/args/%d", ci, ai), "-gate-socket="+filepath.Join(gateDir, "nri.sock"))
			}
		}
		if i := slices.Index([]string{"dra", "nri", "state", "provisioner"}, c.Name); i >= 0 {
			ops = append(ops, fmt.Sprintf("- {op: add, path: /spec/template/spec/containers/%d/args/-, value: -metrics-address=127.0.0.1:%d}", ci, in.ports[i]))
		}
	}
	return strings.Join(ops, "\n") + "\n"
}

// baseDaemonSet is the DaemonSet name of pods/base, rendered by kubectl.
func (in *installer) baseDaemonSet(t *testing.T, name string) *appsv1.DaemonSet {
	t.Helper()
	out := in.k(t, "kustomize", filepath.Join(in.repo, "pods/base"))
	for _, doc := range strings.Split(out, "\n---\n") {
		if !strings.Contains(doc, "kind: DaemonSet\n") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
			t.Fatalf("the base's DaemonSet: %v", err)
		}
		if ds.Name == name {
			return &ds
		}
	}
	t.Fatalf("kubectl kustomize pods/base rendered no DaemonSet %s:\n%s", name, out)
	return nil
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostVeth is a veth of the host netns handed to pods whole (the host
// device manager), with what it must have again once given back.
type hostVeth struct{ name, peer, mac string }

// names are the veths' host ends.
func names(links []hostVeth) []string {
	var out []string
	for _, l := range links {
		out = append(out, l.name)
	}
	return out
}

// hostVeths creates n veth pairs in the host's network namespace (the
// kernel here has no dummy module), replacing any of the same names, and
// removes them at the end of the test.
func hostVeths(t *testing.T, prefix string, n int) []hostVeth {
	t.Helper()
	var out []hostVeth
	for i := range n {
		l := hostVeth{name: fmt.Sprintf("%s%d", prefix, i), peer: fmt.Sprintf("%s%dp", prefix, i), mac: fmt.Sprintf("02:00:00:00:1e:%02x", i)}
		run := func(args ...string) {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		// A run killed before its cleanups (a CI timeout) leaves its pairs
		// behind on a reused machine; they are this test's names, so gone.
		_ = exec.Command("ip", "link", "del", l.name).Run()
		_ = exec.Command("ip", "link", "del", l.peer).Run()
		run("link", "add", l.name, "address", l.mac, "mtu", "1500", "type", "veth", "peer", "name", l.peer)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l.peer).Run() })
		run("link", "set", l.peer, "up")
		out = append(out, l)
	}
	return out
}

// show is `ip -o link show <name>` in the host netns ("" when absent).
func (l hostVeth) show() string {
	out, err := exec.Command("ip", "-o", "link", "show", l.name).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// asBefore reports what differs from the link as it was made.
func (l hostVeth) asBefore() error {
	s := l.show()
	switch {
	case s == "":
		return fmt.Errorf("%s is not in the host's network namespace", l.name)
	case !strings.Contains(s, " mtu 1500 "):
		return fmt.Errorf("%s has another MTU: %s", l.name, s)
	case !strings.Contains(s, "link/ether "+l.mac+" "):
		return fmt.Errorf("%s has another MAC: %s", l.name, s)
	}
	return nil
}

// netdraPrograms lists netdra's eBPF programs (by name) attached, with
// tcx or as tc filters, to the interfaces of the named network namespace
// ns ("": the host's); with ifNames, to those interfaces only (the host's
// other interfaces may be other runs' on a shared machine).
func netdraPrograms(t *testing.T, ns string, ifNames ...string) []string {
	t.Helper()
	on, err := ebpftest.Attached(ns, ebpftest.Netdra)
	if err != nil {
		t.Fatalf("listing the eBPF programs on the interfaces: %v", err)
	}
	if len(ifNames) == 0 {
		return on
	}
	return slices.DeleteFunc(on, func(p string) bool {
		name, _, _ := strings.Cut(p, " ")
		return !slices.Contains(ifNames, name)
	})
}

// bpfTree lists the paths under the host's bpffs netdra pins in.
func bpfTree() []string {
	var out []string
	for _, root := range []string{"/sys/fs/bpf/netdra", "/sys/fs/bpf/netdra-handoff"} {
		_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}
