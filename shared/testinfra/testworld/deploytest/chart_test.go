package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	helmbin "github.com/netdra/netdra/shared/testinfra/testworld/internal/helm"
)

// chart is the Helm chart, relative to podsDir.
const chart = "chart/netdra"

// helm runs the helm binary and returns its standard output.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(helmbin.Binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), stderr.String())
	}
	return out.String()
}

// renderChart is `helm template netdra pods/chart/netdra -n netdra-system`
// with the extra flags.
func renderChart(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	return renderChartIn(t, "netdra-system", extra...)
}

// renderChartIn is renderChart into the release namespace ns.
func renderChartIn(t *testing.T, ns string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", "netdra", filepath.Join(podsDir, chart), "--namespace", ns}, extra...)
	var objs []*unstructured.Unstructured
	for _, doc := range splitYAML([]byte(helm(t, args...))) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		if s := string(j); s == "null" || s == "{}" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("helm template: %v", err)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestChart_Lint runs helm lint --strict on the chart, with the default
// values and with the Namespace made by the chart.
func TestChart_Lint(t *testing.T) {
	helm(t, "lint", "--strict", filepath.Join(podsDir, chart))
	helm(t, "lint", "--strict", "--set", "namespace.create=true", filepath.Join(podsDir, chart))
}

// TestChart_ReleaseNamespace renders the chart into a namespace other than
// netdra-system, with and without the Namespace object: every namespaced
// object is in the release namespace, and every reference to a namespace
// (RBAC subjects, the Namespace itself) names it; netdra-system appears
// nowhere.
func TestChart_ReleaseNamespace(t *testing.T) {
	const ns = "net-other"
	for _, extra := range [][]string{nil, {"--set", "namespace.create=true"}} {
		objs := renderChartIn(t, ns, extra...)
		for _, o := range objs {
			j, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(j), "netdra-system") {
				t.Errorf("%s %v names netdra-system when released into %s", describe(o), extra, ns)
			}
			switch o.GetKind() {
			case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace", "DeviceClass",
				"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			default:
				if o.GetNamespace() != ns {
					t.Errorf("%s is in namespace %q, not the release's %s", describe(o), o.GetNamespace(), ns)
				}
			}
			if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == "netdra-resourceslices" && !strings.Contains(string(j), `\"system:serviceaccount:`+ns+`:netdra-dra\"`) {
				t.Errorf("%s does not match the requests of dra's ServiceAccount in %s: %s", describe(o), ns, j)
			}
			if o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding" {
				b := typed[rbacv1.ClusterRoleBinding](t, o)
				for _, s := range b.Subjects {
					if s.Kind == "ServiceAccount" && s.Namespace != ns {
						t.Errorf("%s binds ServiceAccount %s/%s, not in the release namespace %s", describe(o), s.Namespace, s.Name, ns)
					}
				}
			}
		}
	}
}

// TestChart_MatchesBase renders the chart and the kustomize base and
// compares every object: the same kinds, names and contents. pods/base is
// the chart rendered with namespace.create=true (make manifests), so that
// a chart changed without rendering the base again fails here; with the
// default values the chart renders the same but the Namespace, which
// helm install --create-namespace (or the user) makes.
func TestChart_MatchesBase(t *testing.T) {
	want := map[string]*unstructured.Unstructured{}
	for _, o := range render(t, base) {
		want[describe(o)] = o
	}
	for _, tt := range []struct {
		name  string
		extra []string
		skip  string
	}{
		{"defaults", nil, "Namespace netdra-system"},
		{"namespace.create", []string{"--set", "namespace.create=true"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]*unstructured.Unstructured{}
			for _, o := range renderChart(t, tt.extra...) {
				got[describe(o)] = o
			}
			for k, w := range want {
				g, ok := got[k]
				switch {
				case k == tt.skip:
					if ok {
						t.Errorf("the chart renders %s with the default values", k)
					}
				case !ok:
					t.Errorf("the chart renders no %s", k)
				default:
					if d := cmp.Diff(w.Object, g.Object); d != "" {
						t.Errorf("%s differs (-kustomize +chart):\n%s", k, d)
					}
				}
			}
			for k := range got {
				if want[k] == nil {
					t.Errorf("the chart renders %s, which the base has not", k)
				}
			}
		})
	}
}

// TestChart_Values renders the chart with every value changed and checks
// that each lands where it should, and that the node pod still keeps the
// privilege rules.
func TestChart_Values(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	objs := renderChart(t, "--set", "image.registry=registry.example.com/netdra,image.tag=v1.2.3,image.pullPolicy=Always",
		"--set", "image.pullSecrets[0].name=regcred,images.dra.registry=mirror.example.com/n,images.dra.tag=v1.2.4,images.nri.digest="+digest,
		"--set", "logLevel=debug,node.extraArgs.provisioner[0]=-x=1,operator.extraArgs[0]=-y",
		"--set", "node.podAnnotations.a=b,operator.podAnnotations.c=d,node.updateStrategy.type=OnDelete,operator.updateStrategy.type=Recreate",
		"--set", "node.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=k",
		"--set", "node.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"--set", "driverName=net.example.com,operator.replicas=3,node.nodeSelector.pool=net,metrics.enabled=false",
		"--set", "node.resources.dra.limits.memory=1Gi,kubeletRootDir=/var/lib/k0s/kubelet")
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "netdra-node"))
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["pool"] != "net" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ds.Spec.Template.Annotations["a"] != "b" {
		t.Errorf("node: updateStrategy %+v, pod annotations %v", ds.Spec.UpdateStrategy, ds.Spec.Template.Annotations)
	}
	if a := spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "k" {
		t.Errorf("node: affinity %+v", spec.Affinity)
	}
	if !slices.Equal(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("node: imagePullSecrets %v", spec.ImagePullSecrets)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if bad := privilegeRules(c); len(bad) > 0 {
			t.Errorf("the node pod breaks its privilege rules with these values:\n%s", strings.Join(bad, "\n"))
		}
	}
	// The holder follows the driver name and the kubelet root dir as dra
	// does (its sockets are dra's), and the node pod's placement.
	hds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "netdra-sockets"))
	if bad := holderRules(nodeSets{node: ds, holder: hds}); len(bad) > 0 {
		t.Errorf("the socket holder and dra disagree with these values:\n%s", strings.Join(bad, "\n"))
	}
	if hspec := hds.Spec.Template.Spec; hspec.NodeSelector["pool"] != "net" || hspec.Affinity == nil ||
		!slices.Equal(hspec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("holder: nodeSelector %v, affinity %+v, imagePullSecrets %v: want the node pod's", hspec.NodeSelector, hspec.Affinity, hspec.ImagePullSecrets)
	}
	wantImage := map[string]string{
		"state-dir":   "registry.example.com/netdra/state:v1.2.3",
		"netns-hook":  "registry.example.com/netdra/nri:v1.2.3@" + digest,
		"provisioner": "registry.example.com/netdra/provisioner:v1.2.3",
		"state":       "registry.example.com/netdra/state:v1.2.3",
		"dra":         "mirror.example.com/n/dra:v1.2.4",
		"dra-sockets": "mirror.example.com/n/dra:v1.2.4",
		"nri":         "registry.example.com/netdra/nri:v1.2.3@" + digest,
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers, hds.Spec.Template.Spec.Containers) {
		if c.Image != wantImage[c.Name] || c.ImagePullPolicy != "Always" {
			t.Errorf("%s: image %s, pull policy %q; want %s, Always", c.Name, c.Image, c.ImagePullPolicy, wantImage[c.Name])
		}
		if slices.Contains(nodeProcesses, c.Name) && (!slices.Contains(c.Args, "-metrics-address=") || len(c.Ports) > 0) {
			t.Errorf("%s: metrics not off: %q, ports %v", c.Name, c.Args, c.Ports)
		}
		if (slices.Contains(nodeContainers, c.Name) || c.Name == holder) && !slices.Contains(c.Args, "-log-level=debug") {
			t.Errorf("%s: no -log-level=debug: %q", c.Name, c.Args)
		}
		if c.Name == "provisioner" && c.Args[len(c.Args)-1] != "-x=1" {
			t.Errorf("provisioner: its extra argument is not last: %q", c.Args)
		}
		if c.Name == "dra" {
			if c.Resources.Limits.Memory().String() != "1Gi" {
				t.Errorf("dra: memory limit %s", c.Resources.Limits.Memory())
			}
			if !slices.Contains(c.Args, "-plugin-dir=/var/lib/k0s/kubelet/plugins") ||
				!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/lib/k0s/kubelet/plugins/net.example.com" }) {
				t.Errorf("dra: the kubelet root dir and driver name are not in its flags and mounts: %q %v", c.Args, c.VolumeMounts)
			}
		}
	}
	dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "netdra-operator"))
	op := dep.Spec.Template.Spec.Containers[0]
	if *dep.Spec.Replicas != 3 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || dep.Spec.Template.Annotations["c"] != "d" ||
		op.Image != "registry.example.com/netdra/operator:v1.2.3" || !slices.Contains(op.Args, "-log-level=debug") || op.Args[len(op.Args)-1] != "-y" ||
		!slices.Equal(dep.Spec.Template.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}) {
		t.Errorf("operator: replicas %d, strategy %+v, annotations %v, image %s, args %q, pull secrets %v", *dep.Spec.Replicas, dep.Spec.Strategy,
			dep.Spec.Template.Annotations, op.Image, op.Args, dep.Spec.Template.Spec.ImagePullSecrets)
	}
	role := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "netdra-dra"))
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Equal(r.ResourceNames, []string{"net.example.com"}) }) {
		t.Errorf("dra's ClusterRole does not follow the driver name: %+v", role.Rules)
	}
	dc := find(t, objs, "DeviceClass", "net.example.com")
	if sel, _, _ := unstructured.NestedSlice(dc.Object, "spec", "selectors"); len(sel) != 1 ||
		sel[0].(map[string]any)["cel"].(map[string]any)["expression"] != `device.driver == "net.example.com"` {
		t.Errorf("the DeviceClass does not select the driver: %v", dc.Object["spec"])
	}
}

// TestChart_Defaults: with its default values the chart names each image
// by its release (the images' registry, the chart's appVersion as the
// tag) and renders the CRDs kept at uninstall, the DeviceClass and the
// ResourceSlice policy; each switch takes its object away.
func TestChart_Defaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(podsDir, chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil || meta.AppVersion == "" || meta.AppVersion == "latest" {
		t.Fatalf("Chart.yaml: appVersion %q (%v), want a release", meta.AppVersion, err)
	}
	objs := renderChart(t)
	ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "netdra-node"))
	for _, c := range append(slices.Clone(ds.Spec.Template.Spec.InitContainers), ds.Spec.Template.Spec.Containers...) {
		if !strings.HasPrefix(c.Image, "ghcr.io/netdra/") || !strings.HasSuffix(c.Image, ":"+meta.AppVersion) {
			t.Errorf("%s: image %s, want ghcr.io/netdra/<service>:%s", c.Name, c.Image, meta.AppVersion)
		}
	}
	for _, name := range []string{"nodeconfigs.netdra.io", "clusterconfigs.netdra.io"} {
		crd := find(t, objs, "CustomResourceDefinition", name)
		if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s is not kept at helm uninstall: annotations %v", name, crd.GetAnnotations())
		}
	}
	find(t, objs, "DeviceClass", "netdra.io")
	find(t, objs, "ValidatingAdmissionPolicy", "netdra-resourceslices")
	find(t, objs, "ValidatingAdmissionPolicyBinding", "netdra-resourceslices")

	kinds := func(objs []*unstructured.Unstructured) map[string]bool {
		m := map[string]bool{}
		for _, o := range objs {
			m[o.GetKind()] = true
		}
		return m
	}
	find(t, objs, "ValidatingAdmissionPolicy", "netdra-claims")
	find(t, objs, "ValidatingAdmissionPolicyBinding", "netdra-claims")
	off := kinds(renderChart(t, "--set", "crds.install=false,deviceClass.create=false,resourceSlicePolicy.enabled=false,claimPolicy.enabled=false"))
	for _, k := range []string{"CustomResourceDefinition", "DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if off[k] {
			t.Errorf("a %s is rendered with its switch off", k)
		}
	}
	for _, o := range renderChart(t, "--set", "crds.keep=false") {
		if o.GetKind() == "CustomResourceDefinition" && o.GetAnnotations()["helm.sh/resource-policy"] != "" {
			t.Errorf("CRD %s kept with crds.keep=false", o.GetName())
		}
	}
}

// TestChart_SchemaRefusesBadValues: values.schema.json makes helm refuse a
// value of the wrong type, an unknown key and a malformed digest, naming
// the value.
func TestChart_SchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"operator.replicas=two", "/operator/replicas"},
		{"metrics.enabled=maybe", "/metrics/enabled"},
		{"image.pullSecrets=regcred", "/image/pullSecrets"},
		{"node.extraArgs.dra=-x", "/node/extraArgs/dra"},
		{"imag.tag=v1", "imag"},
		{"images.dra.digest=sha256:abc", "/images/dra/digest"},
		{"logLevel=verbose", "/logLevel"},
		{"kubeletRootDir=relative/path", "/kubeletRootDir"},
	} {
		cmd := exec.Command(helmbin.Binary(t), "template", "netdra", filepath.Join(podsDir, chart), "--set", tc.set)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("--set %s: helm rendered the chart", tc.set)
			continue
		}
		if !strings.Contains(string(out), "schema") || !strings.Contains(string(out), tc.want) {
			t.Errorf("--set %s: helm said %q, want a schema error naming %s", tc.set, out, tc.want)
		}
	}
}
