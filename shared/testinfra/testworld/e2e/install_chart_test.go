package e2e

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"

	"github.com/netdra/netdra/shared/testinfra/testenv"
	helmbin "github.com/netdra/netdra/shared/testinfra/testworld/internal/helm"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_InstallChart installs netdra's last release with the Helm chart
// on a real node and upgrades it to this tree's, as a user does:
// `make release` builds the images as OCI indexes and the chart pinned to
// their digests and pushes both to a registry (go-containerregistry's,
// served by the test on a loopback port), the last release from a clone
// at its commit, the next from this tree; helm installs the last one from
// that registry into netdra-e2e, not netdra-system, the node's paths given
// as values (kubeletRootDir, nriSocketDir, stateDir, cdiDir) instead of the
// kustomize overlay's patch; the node's containerd pulls every image from
// the registry. Then: both rollouts, a pod with a claim Running with net1,
// health through kubectl exec, the metrics scraped on the pod's IP, a helm
// upgrade to this tree's release while the pod holds its device (it keeps
// it; a pod created after gets the other), the chart's nri-disconnected
// alert firing on nri's samples scraped while the node's containerd is
// killed and started again (nriDisconnectedFires), a helm rollback to the last
// release while both hold theirs (they keep them; the second's, freed,
// goes to a third pod); then helm uninstall, the CRDs (which the release
// keeps) deleted with kubectl delete -k pods/chart/netdra/files/crds and
// the namespace: every device back, nothing left on the node but the state
// file. The chart's ResourceSlice policy is on throughout: dra publishes
// its node's slices through it.
func TestE2E_InstallChart(t *testing.T) {
	testenv.RequireRoot(t, "runs a real node and hands host veths to pods")
	t0 := time.Now()
	cp := worldtest.ControlPlane(t)
	n := worldtest.Node(t, cp)
	in := newInstaller(t, cp, n)
	in.ns = "netdra-e2e"
	links := hostVeths(t, "ndch", 2)
	bpfBefore := bpfTree()
	helm := helmbin.Binary(t)
	reg := serveRegistry(t)

	// The last release, built from its commit as its own release command
	// builds it, and this tree as the next one.
	first, next := lastRelease, "v0.2.0-e2e"
	in.release(t, reg, first, in.checkout(t, lastReleaseCommit))
	values := filepath.Join(in.dir, "values.yaml")
	write(t, values, fmt.Sprintf(`kubeletRootDir: %s
nriSocketDir: %s
stateDir: %s
cdiDir: %s
metrics: {ports: {dra: %d, nri: %d, state: %d, provisioner: %d}}
`, n.KubeletDir(), n.NRIDir(), filepath.Join(n.Dir(), "netdra-state"), n.CDIDir(), in.ports[0], in.ports[1], in.ports[2], in.ports[3]))
	chart := "oci://" + reg + "/netdra/charts/netdra"
	t.Cleanup(func() {
		if t.Failed() {
			in.forceUninstall(t, "")
		}
		_, _ = in.try(2*time.Minute, helm, "uninstall", "netdra", "-n", in.ns, "--ignore-not-found")
		_, _ = in.try(time.Minute, in.kubectl, "delete", "-k", filepath.Join(in.repo, "pods/chart/netdra/files/crds"), "--ignore-not-found")
		_, _ = in.try(time.Minute, in.kubectl, "delete", "namespace", in.ns, "--ignore-not-found")
	})
	// The shared control plane has netdra's CRDs from the tests before
	// (applied, not Helm's): given to the release as the chart's README
	// tells a user who applied them otherwise.
	for _, crd := range []string{"nodeconfigs.netdra.io", "clusterconfigs.netdra.io"} {
		if _, err := in.try(time.Minute, in.kubectl, "get", "crd", crd); err != nil {
			continue
		}
		in.k(t, "label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
		in.k(t, "annotate", "--overwrite", "crd", crd, "meta.helm.sh/release-name=netdra", "meta.helm.sh/release-namespace="+in.ns)
	}
	in.run(t, 4*time.Minute, helm, "install", "netdra", chart, "--version", chartVersion(first), "--plain-http",
		"-n", in.ns, "--create-namespace", "-f", values)
	in.k(t, "-n", in.ns, "rollout", "status", "ds/netdra-node", "--timeout=3m")
	in.k(t, "-n", in.ns, "rollout", "status", "deploy/netdra-operator", "--timeout=3m")
	nodePod := in.nodePod(t)
	for _, c := range append(nodePod.Spec.InitContainers, nodePod.Spec.Containers...) {
		if !strings.HasPrefix(c.Image, reg+"/netdra/") || !strings.Contains(c.Image, ":"+first+"@sha256:") {
			t.Errorf("container %s runs %s, want the release's %s/netdra/<service>:%s@sha256:...", c.Name, c.Image, reg, first)
		}
	}

	in.configure(t, links)
	pod := in.demoPod(t)
	in.k(t, "-n", in.ns, "exec", "ds/netdra-node", "-c", "dra", "--", "/usr/local/bin/dra", "health", "-socket=/run/netdra/dra.sock")
	in.scrapeLikePrometheus(t, nodePod)

	// helm upgrade from the last release to this tree's while the pod
	// holds a device: this release reads the state file and the claims'
	// status the last one wrote.
	in.release(t, reg, next, in.repo)
	nodePod = in.roll(t, ":"+next+"@sha256:", nodePod, pod, 0, func() {
		in.run(t, 4*time.Minute, helm, "upgrade", "netdra", chart, "--version", chartVersion(next), "--plain-http", "-n", in.ns, "-f", values)
	})
	// This release holds dra's kubelet sockets in the netdra-sockets
	// DaemonSet.
	in.holderHealthy(t)
	// The chart's alert on what this release's nri exports while the
	// node's containerd is down.
	in.nriDisconnectedFires(t, nodePod, helm)

	// helm rollback to the last release while both pods hold devices: it
	// reads what this one wrote. Both pods keep their devices; the second
	// one's device, freed, goes to a third pod.
	in.run(t, 4*time.Minute, helm, "rollback", "netdra", "1", "-n", in.ns)
	in.k(t, "-n", in.ns, "rollout", "status", "ds/netdra-node", "--timeout=3m")
	in.k(t, "-n", in.ns, "rollout", "status", "deploy/netdra-operator", "--timeout=3m")
	rolledBack := time.Now()
	if cur := in.nodePod(t); cur.UID == nodePod.UID || !strings.Contains(cur.Spec.Containers[0].Image, ":"+first+"@sha256:") {
		t.Fatalf("helm rollback did not roll the DaemonSet back to %s: pod %s runs %s", first, cur.Name, cur.Spec.Containers[0].Image)
	} else {
		nodePod = cur
	}
	for name, addr := range map[string]string{"netdra-demo": "10.100.0.10/24", "netdra-demo-2": "10.100.0.11/24"} {
		waitFor(t, name+"'s dump of its network after the rollback", time.Minute, func(ctx context.Context) (bool, error) {
			log, err := in.try(20*time.Second, in.kubectl, "-n", "netdra-demo", "logs", name)
			return err == nil && lastDumpAfter(log, rolledBack) && strings.Contains(lastDump(log), "\n    inet "+addr+"\n"), nil
		})
	}
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo-2.yaml"), "--timeout=2m")
	in.k(t, "apply", "-f", in.demoManifest(t, "netdra-demo-3", "10.100.0.12/24"))
	in.k(t, "-n", "netdra-demo", "wait", "--for=condition=Ready", "pod/netdra-demo-3", "--timeout=2m")
	waitFor(t, "the third pod's dump of its network", time.Minute, func(ctx context.Context) (bool, error) {
		log, err := in.try(20*time.Second, in.kubectl, "-n", "netdra-demo", "logs", "netdra-demo-3")
		return err == nil && strings.Contains(lastDump(log), "\n    inet 10.100.0.12/24\n"), nil
	})

	// Every manifest holds the demo namespace: the later ones find it going.
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo-3.yaml"), "--ignore-not-found", "--timeout=2m")
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo.yaml"), "--ignore-not-found", "--timeout=2m")
	for _, l := range links {
		if err := l.asBefore(); err != nil {
			t.Errorf("after the demo pod's deletion: %v", err)
		}
	}
	in.k(t, "delete", "-f", filepath.Join(in.repo, "pods/examples/device-classes.yaml"), "-f", filepath.Join(in.dir, "cluster-config.yaml"))
	in.run(t, 4*time.Minute, helm, "uninstall", "netdra", "-n", in.ns, "--wait")
	in.k(t, "delete", "-k", filepath.Join(in.repo, "pods/chart/netdra/files/crds"))
	in.k(t, "delete", "namespace", in.ns) // made by --create-namespace, not the release
	in.checkNothingLeft(t, nodePod, bpfBefore, links)
	t.Logf("released to a registry, installed the last release from it with Helm, used, upgraded to this tree's, rolled back and uninstalled in %s", time.Since(t0).Round(time.Millisecond))
}

// lastRelease is netdra's last release, made at lastReleaseCommit (its
// git tag's commit, named by hash so that a clone without tags has it;
// checkout checks the tag against it where the clone has the tag).
const (
	lastRelease       = "v0.1.0"
	lastReleaseCommit = "961dbe807f1fac590e6e44e82ff8c6de88e96ea4"
)

// checkout returns a clone of the repository at commit, in the test's
// directory (the repository itself is left as it is).
func (in *installer) checkout(t *testing.T, commit string) string {
	t.Helper()
	if tagged, err := in.try(time.Minute, "git", "-C", in.repo, "rev-parse", "--verify", "-q", lastRelease+"^{commit}"); err == nil &&
		strings.TrimSpace(tagged) != lastReleaseCommit {
		t.Fatalf("tag %s is commit %s, lastReleaseCommit says %s", lastRelease, strings.TrimSpace(tagged), lastReleaseCommit)
	}
	dir := filepath.Join(in.dir, "release-"+commit[:12])
	in.run(t, 2*time.Minute, "git", "clone", "-q", "--no-checkout", in.repo, dir)
	in.run(t, time.Minute, "git", "-C", dir, "checkout", "-q", "--detach", commit)
	return dir
}

// release runs repo's `make release VERSION=version PUSH=1` for this
// machine's architecture, into the registry at reg (host:port) under
// netdra/.
func (in *installer) release(t *testing.T, reg, version, repo string) {
	t.Helper()
	t0 := time.Now()
	out := in.run(t, 15*time.Minute, "make", "-C", repo, "release", "VERSION="+version, "RELEASE_REGISTRY="+reg+"/netdra",
		"RELEASE_ARCHS="+runtime.GOARCH, "PUSH=1")
	t.Logf("make release VERSION=%s (%s): %s\n%s", version, repo, time.Since(t0).Round(time.Millisecond), out)
}

// chartVersion is the chart version of a release's version: without the v.
func chartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// serveRegistry serves an OCI registry (go-containerregistry's, in
// memory) on a loopback port until the test ends, and returns its
// host:port: plain HTTP, which helm (--plain-http), go-containerregistry
// and containerd speak to a loopback registry.
func serveRegistry(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// scrapeLikePrometheus scrapes every process's metrics as the chart's
// PodMonitor has Prometheus do: the node pod's named metrics ports, on the
// pod's IP (the node's, not loopback: the chart binds $(POD_IP)).
func (in *installer) scrapeLikePrometheus(t *testing.T, nodePod *corev1.Pod) {
	t.Helper()
	ports := map[string]int32{}
	for _, c := range nodePod.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	ip := nodePod.Status.PodIP
	if ip == "" || net.ParseIP(ip).IsLoopback() {
		t.Fatalf("the node pod's IP is %q, want the node's address", ip)
	}
	for i, who := range []string{"dra", "nri", "state", "prov"} {
		port, ok := ports["metrics-"+who]
		if !ok || int(port) != in.ports[i] {
			t.Errorf("the node pod's port metrics-%s is %d (%v), want %d", who, port, ok, in.ports[i])
			continue
		}
		body := httpGet(t, fmt.Sprintf("http://%s/metrics", net.JoinHostPort(ip, fmt.Sprint(port))))
		if !strings.Contains(body, "\nnetdra_") {
			t.Errorf("%s's metrics on %s:%d have no netdra_ series:\n%.2000s", who, ip, port, body)
		}
	}
}
