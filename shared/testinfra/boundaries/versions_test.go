package boundaries

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	kversion "k8s.io/apimachinery/pkg/util/version"
)

// Upstream versions the docs state as floors or facts. No module pins
// them: each is the release a feature netdra relies on came with, stated
// once here with the fact it rests on, and every page must agree.
const (
	// kubernetesFloor: resource.k8s.io/v1, which dra speaks, is served
	// by default from Kubernetes 1.34.
	kubernetesFloor = "1.34"
	// nriValidatorFloor: NRI's default validator (the required-plugins
	// annotation) came with NRI v0.10.
	nriValidatorFloor = "0.10"
	// containerdValidatorFloor: the first containerd with NRI v0.10.
	containerdValidatorFloor = "2.2"
	// containerdNRIOptIn: containerd 1.7 has NRI, off by default.
	containerdNRIOptIn = "1.7"
	// linuxBigTCPv4Floor: IFLA_GSO_IPV4_MAX_SIZE and
	// IFLA_GRO_IPV4_MAX_SIZE came with Linux 6.3.
	linuxBigTCPv4Floor = "6.3"
	// multusPodResources: the last Multus release that reads DRA devices
	// only from the kubelet's PodResources API.
	multusPodResources = "4.3.0"
)

// versionRow is a sentence of a page naming versions: re matches it, its
// groups are the versions (without a leading v), in want's order.
type versionRow struct {
	file string
	re   string
	want []string
}

// docVersionRows is every sentence of the docs that names a version of
// Kubernetes, a runtime, NRI, the kernel or a peer, with its source of
// truth: the go.mod that pins what the test world runs, the kernel rig's
// set-up, or the floors above.
func docVersionRows(t *testing.T, root string) []versionRow {
	t.Helper()
	world := "shared/testinfra/testworld/"
	kube := goModVersion(t, root, world+"go.mod", "k8s.io/kubernetes")
	containerd := goModVersion(t, root, world+"realnode/tools/containerd/go.mod", "github.com/containerd/containerd/v2")
	crio := goModVersion(t, root, world+"realnode/tools/crio/go.mod", "github.com/cri-o/cri-o")
	crioNRI := minor(goModVersion(t, root, world+"realnode/tools/crio/go.mod", "github.com/containerd/nri"))
	cni := goModVersion(t, root, world+"realnode/tools/cni/go.mod", "github.com/containernetworking/plugins")
	kernel := fmt.Sprint(codeNumbers(t, root, "shared/testinfra/kernelrig/setup.sh", `linux-source-(\d+\.\d+)`)[0])
	return []versionRow{
		{"README.md", `Kubernetes (\d+\.\d+) or later`, []string{kubernetesFloor}},
		{"docs/install.md", `resource\.k8s\.io/v1` + "`" + ` \((\d+\.\d+) or later; the test world is\s+(\d+\.\d+)\)`, []string{kubernetesFloor, minor(kube)}},
		{"docs/install.md", `kubectl v(\d+\.\d+\.\d+)`, []string{kube}},
		{"docs/install.md", `containerd (\d+\.\d+): ` + "`disable = false`", []string{containerdNRIOptIn}},
		{"docs/install.md", `\*\*CRI-O\*\* \(tested: v(\d+\.\d+\.\d+)\): CRI-O (\d+\.\d+) turns`, []string{crio, minor(crio)}},
		{"docs/install.md", `CRI-O other than (\d+\.\d+) is untested`, []string{minor(crio)}},
		{"docs/install.md", `CRI-O (\d+\.\d+) has no NRI validator \(its NRI is v(\d+\.\d+); the default validator\s+came with NRI v(\d+\.\d+), in containerd (\d+\.\d+)\)`, []string{minor(crio), crioNRI, nriValidatorFloor, containerdValidatorFloor}},
		{"docs/install.md", `runs CRI-O v(\d+\.\d+\.\d+) so`, []string{crio}},
		{"docs/install.md", `GA in\s+Kubernetes v(\d+\.\d+)\)`, []string{minor(kube)}},
		{"docs/install.md", `after v(\d+\.\d+\.\d+)\)`, []string{multusPodResources}},
		{"docs/install.md", `Multus v(\d+\.\d+\.\d+) and older`, []string{multusPodResources}},
		{"docs/architecture.md", `containerd (\d+\.\d+\.\d+) forgets`, []string{containerd}},
		{"docs/architecture.md", `on by default in Kubernetes v(\d+\.\d+)\)`, []string{minor(kube)}},
		{"docs/architecture.md", `DRADeviceTaints, GA in v(\d+\.\d+)`, []string{minor(kube)}},
		{"docs/architecture.md", `# containerd (\d+\.\d+) and later`, []string{containerdValidatorFloor}},
		{"docs/architecture.md", `\(CRI-O (\d+\.\d+) has no NRI validator and does not read the annotation: its\s+NRI is v(\d+\.\d+), the validator came with NRI v(\d+\.\d+);`, []string{minor(crio), crioNRI, nriValidatorFloor}},
		{"docs/claims.md", `Linux (\d+\.\d+) and later`, []string{linuxBigTCPv4Floor}},
		{"docs/testing.md", `Kubernetes v(\d+\.\d+\.\d+)`, []string{kube}},
		{"docs/testing.md", `kubelet v(\d+\.\d+\.\d+)`, []string{kube}},
		{"docs/testing.md", `kubectl v(\d+\.\d+\.\d+)`, []string{kube}},
		{"docs/testing.md", `containerd v(\d+\.\d+\.\d+)`, []string{containerd}},
		{"docs/testing.md", `CRI-O v(\d+\.\d+\.\d+)`, []string{crio}},
		{"docs/testing.md", `CRI-O (\d+\.\d+)'s NRI is v(\d+\.\d+)`, []string{minor(crio), crioNRI}},
		{"docs/testing.md", `host-local v(\d+\.\d+\.\d+)`, []string{cni}},
		{"docs/testing.md", `real Debian (\d+\.\d+) kernel`, []string{kernel}},
	}
}

// goModVersion is the version (without its v) the go.mod file requires
// of module.
func goModVersion(t *testing.T, root, file, module string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + ` v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s requires no %s: update the row that reads it", file, module)
	}
	return string(m[1])
}

// minor is a version's major.minor.
func minor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// TestDocsVersions checks the versions the docs name against their
// source of truth (docVersionRows); each sentence must still be there.
func TestDocsVersions(t *testing.T) {
	root := moduleRoot(t)
	for _, tc := range docVersionRows(t, root) {
		checkSentence(t, root, tc.file, tc.re, len(tc.want), func(got string, i int) bool { return got == tc.want[i] },
			func(i int) string { return tc.want[i] })
	}
}

// TestDocsVersionFloorsHold checks the floors against what the test world
// runs: the tested versions are at or above them, and CRI-O's NRI is
// below the validator's, as the docs say.
func TestDocsVersionFloorsHold(t *testing.T) {
	root := moduleRoot(t)
	world := "shared/testinfra/testworld/"
	kubeAPI := goModVersion(t, root, "go.mod", "k8s.io/api")
	if !atLeast(t, "1"+strings.TrimPrefix(minor(kubeAPI), "0"), kubernetesFloor) {
		t.Errorf("go.mod's k8s.io/api v%s is older than the Kubernetes floor %s", kubeAPI, kubernetesFloor)
	}
	if c := goModVersion(t, root, world+"realnode/tools/containerd/go.mod", "github.com/containerd/containerd/v2"); !atLeast(t, c, containerdValidatorFloor) {
		t.Errorf("the tested containerd %s is older than %s, the docs' floor for its validator", c, containerdValidatorFloor)
	}
	if n := goModVersion(t, root, world+"realnode/tools/containerd/go.mod", "github.com/containerd/nri"); !atLeast(t, n, nriValidatorFloor) {
		t.Errorf("the tested containerd's NRI %s has no default validator (%s)", n, nriValidatorFloor)
	}
	if n := goModVersion(t, root, world+"realnode/tools/crio/go.mod", "github.com/containerd/nri"); atLeast(t, n, nriValidatorFloor) {
		t.Errorf("the tested CRI-O's NRI %s has the default validator: the docs say CRI-O holds nothing back by it", n)
	}
}

// atLeast says whether version v is at or above floor, as
// apimachinery's generic versions compare (a pre-release suffix is not
// looked at).
func atLeast(t *testing.T, v, floor string) bool {
	t.Helper()
	got, err := kversion.ParseGeneric(v)
	if err != nil {
		t.Fatalf("version %q: %v", v, err)
	}
	return got.AtLeast(kversion.MustParseGeneric(floor))
}

// version matches a version of a product the docs name.
var version = regexp.MustCompile(`\b(?:Kubernetes|kubelet|kubectl|containerd|CRI-O|NRI|Linux|Debian|Multus|host-local|QEMU|Helm|Go|iproute2)\s+v?(\d+\.\d+(?:\.\d+)?)`)

// TestDocsVersionsAllChecked checks that every version of a product in
// the docs' text (code blocks and code spans aside) is in a sentence of
// docVersionRows.
func TestDocsVersionsAllChecked(t *testing.T) {
	root := moduleRoot(t)
	rows := docVersionRows(t, root)
	res := map[string][]string{}
	for _, r := range rows {
		res[r.file] = append(res[r.file], r.re)
	}
	checked := checkCovered(t, root, res, version, "a version no row of docVersionRows checks; add the row with its source")
	t.Logf("checked %d versions, %d sentences with versions", checked, len(rows))
}
