package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/testinfra/testenv"
	helmbin "github.com/netdra/netdra/shared/testinfra/testworld/internal/helm"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_InstallChart installs netdra with the Helm chart on a real node,
// as the README's "Install with Helm" says, the node's paths given as
// values (kubeletRootDir, nriSocketDir, stateDir, cdiDir) instead of the
// kustomize overlay's patch: both rollouts, a pod with a claim Running
// with net1, health through kubectl exec, a helm upgrade to a new image
// tag while the pod holds its device (it keeps it; a pod created after
// gets the other); then helm uninstall, the CRDs (which the release keeps)
// deleted with kubectl delete -k pods/chart/netdra/files/crds and the
// namespace: every device back, nothing left on the node but the state
// file. The chart's ResourceSlice policy is on throughout: dra publishes
// its node's slices through it.
func TestE2E_InstallChart(t *testing.T) {
	testenv.RequireRoot(t, "runs a real node and hands host veths to pods")
	t0 := time.Now()
	cp := worldtest.ControlPlane(t)
	n := worldtest.Node(t, cp)
	in := newInstaller(t, cp, n)
	links := hostVeths(t, "ndch", 2)
	bpfBefore := bpfTree()
	helm := helmbin.Binary(t)

	const tag = "e2e-chart"
	in.loadImages(t, tag)
	values := filepath.Join(in.dir, "values.yaml")
	write(t, values, fmt.Sprintf(`image: {registry: localhost/netdra, tag: %s}
kubeletRootDir: %s
nriSocketDir: %s
stateDir: %s
cdiDir: %s
metrics: {draAddress: "127.0.0.1:%d", nriAddress: "127.0.0.1:%d", stateAddress: "127.0.0.1:%d", provisionerAddress: "127.0.0.1:%d"}
`, tag, n.KubeletDir(), n.NRIDir(), filepath.Join(n.Dir(), "netdra-state"), n.CDIDir(), in.ports[0], in.ports[1], in.ports[2], in.ports[3]))
	chart := filepath.Join(in.repo, "pods/chart/netdra")
	t.Cleanup(func() {
		if t.Failed() {
			in.forceUninstall(t, "")
		}
		_, _ = in.try(2*time.Minute, helm, "uninstall", "netdra", "-n", "netdra-system", "--ignore-not-found")
		_, _ = in.try(time.Minute, in.kubectl, "delete", "-k", filepath.Join(in.repo, "pods/chart/netdra/files/crds"), "--ignore-not-found")
		_, _ = in.try(time.Minute, in.kubectl, "delete", "namespace", "netdra-system", "--ignore-not-found")
	})
	// The shared control plane has netdra's CRDs from the tests before
	// (applied, not Helm's): given to the release as the chart's README
	// tells a user who applied them otherwise.
	for _, crd := range []string{"nodeconfigs.netdra.io", "clusterconfigs.netdra.io"} {
		if _, err := in.try(time.Minute, in.kubectl, "get", "crd", crd); err != nil {
			continue
		}
		in.k(t, "label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
		in.k(t, "annotate", "--overwrite", "crd", crd, "meta.helm.sh/release-name=netdra", "meta.helm.sh/release-namespace=netdra-system")
	}
	in.run(t, 4*time.Minute, helm, "install", "netdra", chart, "-n", "netdra-system", "--create-namespace", "-f", values)
	in.k(t, "-n", "netdra-system", "rollout", "status", "ds/netdra-node", "--timeout=3m")
	in.k(t, "-n", "netdra-system", "rollout", "status", "deploy/netdra-operator", "--timeout=3m")
	nodePod := in.nodePod(t)

	in.configure(t, links)
	pod := in.demoPod(t)
	in.k(t, "-n", "netdra-system", "exec", "ds/netdra-node", "-c", "dra", "--", "/usr/local/bin/dra", "health", "-socket=/run/netdra/dra.sock")

	// helm upgrade to a new image tag while the pod holds a device.
	nodePod = in.roll(t, tag+"-2", nodePod, pod, func(tag string) {
		in.run(t, 4*time.Minute, helm, "upgrade", "netdra", chart, "-n", "netdra-system", "-f", values, "--set", "image.tag="+tag)
	})

	// Both manifests hold the demo namespace: the second finds it going.
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo-2.yaml"), "--ignore-not-found", "--timeout=2m")
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo.yaml"), "--ignore-not-found", "--timeout=2m")
	for _, l := range links {
		if err := l.asBefore(); err != nil {
			t.Errorf("after the demo pod's deletion: %v", err)
		}
	}
	in.k(t, "delete", "-f", filepath.Join(in.repo, "pods/examples/device-classes.yaml"), "-f", filepath.Join(in.dir, "cluster-config.yaml"))
	in.run(t, 4*time.Minute, helm, "uninstall", "netdra", "-n", "netdra-system", "--wait")
	in.k(t, "delete", "-k", filepath.Join(in.repo, "pods/chart/netdra/files/crds"))
	in.k(t, "delete", "namespace", "netdra-system") // made by --create-namespace, not the release
	in.checkNothingLeft(t, nodePod, bpfBefore, links)
	t.Logf("installed with Helm, used, upgraded to a new tag and uninstalled in %s", time.Since(t0).Round(time.Millisecond))
}
