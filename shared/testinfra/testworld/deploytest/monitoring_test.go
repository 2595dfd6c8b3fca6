package deploytest

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/netdra/netdra/shared/testinfra/testworld/internal/promtool"
)

// monitoringOn are the values that turn every monitoring part on.
var monitoringOn = []string{"--set", "metrics.podMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
	"--set", "metrics.grafanaDashboard.enabled=true"}

// exported are the metrics netdra's processes export (their own and the
// Go client's), as a prefix match, and kube-state-metrics' restart
// counter: an alert or a panel naming anything else watches nothing.
var exported = regexp.MustCompile(`^(netdra_(dra|nri|state|grpc_server)_\w+|process_\w+|go_\w+|kube_pod_container_status_restarts_total)$`)

// TestChart_Monitoring: by default the chart makes no PodMonitor,
// PrometheusRule or dashboard; with them on, the PodMonitor scrapes every
// process's named metrics port of the node pod (each on the pod's IP; the
// socket holder has none), and the dashboard is valid JSON whose queries
// parse.
func TestChart_Monitoring(t *testing.T) {
	for _, o := range renderChart(t) {
		if o.GetKind() == "PodMonitor" || o.GetKind() == "PrometheusRule" || o.GetName() == "netdra-dashboard" {
			t.Errorf("%s %s rendered with monitoring off", o.GetKind(), o.GetName())
		}
	}
	objs := renderChart(t, monitoringOn...)
	ds := find(t, objs, "DaemonSet", "netdra-node")
	spec, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	ports := map[string]string{}
	for _, c := range spec {
		c := c.(map[string]any)
		var ctr corev1.Container
		b, _ := json.Marshal(c)
		if err := json.Unmarshal(b, &ctr); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(nodeProcesses, ctr.Name) {
			// The socket holder exports no metrics; its restarts are
			// kube-state-metrics' like every container's.
			if len(ctr.Ports) > 0 {
				t.Errorf("%s: ports %v, want none (it serves no metrics)", ctr.Name, ctr.Ports)
			}
			continue
		}
		if len(ctr.Ports) != 1 || len(ctr.Ports[0].Name) > 15 {
			t.Errorf("%s: ports %v, want one named metrics port", ctr.Name, ctr.Ports)
			continue
		}
		ports[ctr.Ports[0].Name] = ctr.Name
		if want := "-metrics-address=$(POD_IP):" + itoa(ctr.Ports[0].ContainerPort); !slices.Contains(ctr.Args, want) {
			t.Errorf("%s: args %q, want %s", ctr.Name, ctr.Args, want)
		}
		if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}) {
			t.Errorf("%s: no POD_IP from status.podIP: %v", ctr.Name, ctr.Env)
		}
	}
	pm := find(t, objs, "PodMonitor", "netdra-node")
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	var scraped []string
	for _, e := range eps {
		scraped = append(scraped, e.(map[string]any)["port"].(string))
	}
	slices.Sort(scraped)
	want := []string{"metrics-dra", "metrics-nri", "metrics-prov", "metrics-state"}
	have := slices.Sorted(maps.Keys(ports))
	if !slices.Equal(scraped, want) || !slices.Equal(have, want) {
		t.Errorf("PodMonitor scrapes %v, containers name %v; want %v", scraped, have, want)
	}

	cm := typed[corev1.ConfigMap](t, find(t, objs, "ConfigMap", "netdra-dashboard"))
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v", cm.Labels)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["netdra.json"]), &dash); err != nil || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: %v (%d panels)", err, len(dash.Panels))
	}
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$node", ".*")
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			checkExpr(t, "panel "+p.Title, grafanaVars.Replace(tg.Expr))
		}
	}
}

// TestChart_PrometheusRule does what `promtool check rules` does on the
// chart's PrometheusRule: its groups parse and validate as a rule file
// (rulefmt), every expression parses (PromQL), and each names only metrics
// netdra exports or kube-state-metrics' restart counter. The alerts the
// chart promises are all there.
func TestChart_PrometheusRule(t *testing.T) {
	pr := find(t, renderChart(t, monitoringOn...), "PrometheusRule", "netdra")
	spec, _, _ := unstructured.NestedMap(pr.Object, "spec")
	b, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil {
		t.Fatal("no rule groups")
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr(t, r.Alert, r.Expr)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: no severity or summary", r.Alert)
			}
		}
	}
	for _, a := range []string{"NetdraDeviceLost", "NetdraIPPoolNearlyExhausted", "NetdraNRIDisconnected", "NetdraPrepareFailures", "NetdraProcessRestarting"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("no alert %s among %v", a, alerts)
		}
	}
}

// TestChart_AlertRules runs promtool on the chart's PrometheusRule as an
// operator would before loading it: `promtool check rules` on its groups,
// then `promtool test rules` with testdata/alerts.promtest.yaml, in which
// every alert fires on synthetic series, with its labels and rendered
// annotations checked, and stays quiet where it must not page. A rule
// file promtool refuses, or a test case it fails, fails the test with
// promtool's output.
func TestChart_AlertRules(t *testing.T) {
	bin := promtool.Binary(t)
	dir := t.TempDir()
	rendered := helm(t, append([]string{"template", "netdra", filepath.Join(podsDir, chart), "--namespace", "netdra-system",
		"--show-only", "templates/monitoring.yaml"}, monitoringOn...)...)
	rules := promtool.RuleFile(t, []byte(rendered), "netdra", filepath.Join(dir, "rules.yaml"))
	if out, err := promtool.Run(bin, "check", "rules", rules); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cases, err := os.ReadFile(filepath.Join("testdata", "alerts.promtest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := filepath.Join(dir, "alerts.promtest.yaml")
	if err := os.WriteFile(tests, cases, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := promtool.Run(bin, "test", "rules", tests)
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// Each alert of the chart has a case: an alert added without one
	// would pass unchecked.
	for _, r := range alertNames(t, rules) {
		if !strings.Contains(string(cases), "alertname: "+r+"\n") {
			t.Errorf("alert %s has no case in testdata/alerts.promtest.yaml", r)
		}
	}
}

// alertNames returns the names of the alerts of the rule file at path.
func alertNames(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rulefmt: %v", errs)
	}
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no alerts in the rendered PrometheusRule")
	}
	return names
}

// checkExpr parses expr and checks the metrics it names.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if ok && !exported.MatchString(vs.Name) {
			t.Errorf("%s: names %s, which netdra does not export", where, vs.Name)
		}
		return nil
	})
}

func itoa(n int32) string {
	b, _ := json.Marshal(n)
	return string(b)
}
