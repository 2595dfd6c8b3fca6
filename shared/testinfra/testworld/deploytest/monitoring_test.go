package deploytest

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
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
// process's metrics port of the node pod on the pod's IP (the containers
// declare no ports: on the host network a declared port is a host port,
// which would keep a roll's next node pod off the node; Prometheus'
// relabeling, run here on the targets its pod discovery makes, keeps one
// target per process at its -metrics-address port), and the dashboard is
// valid JSON whose queries parse.
func TestChart_Monitoring(t *testing.T) {
	for _, o := range renderChart(t) {
		if o.GetKind() == "PodMonitor" || o.GetKind() == "PrometheusRule" || o.GetName() == "netdra-dashboard" {
			t.Errorf("%s %s rendered with monitoring off", o.GetKind(), o.GetName())
		}
	}
	objs := renderChart(t, monitoringOn...)
	ds := find(t, objs, "DaemonSet", "netdra-node")
	spec, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	ports := map[string]string{} // container: its metrics port
	var containers []string
	for _, c := range spec {
		c := c.(map[string]any)
		var ctr corev1.Container
		b, _ := json.Marshal(c)
		if err := json.Unmarshal(b, &ctr); err != nil {
			t.Fatal(err)
		}
		containers = append(containers, ctr.Name)
		if len(ctr.Ports) > 0 {
			t.Errorf("%s: ports %v, want none (a host port keeps the roll's next pod off the node)", ctr.Name, ctr.Ports)
		}
		if !slices.Contains(nodeProcesses, ctr.Name) {
			continue // the socket holder exports no metrics
		}
		for _, a := range ctr.Args {
			if port, ok := strings.CutPrefix(a, "-metrics-address=$(POD_IP):"); ok {
				ports[ctr.Name] = port
			}
		}
		if ports[ctr.Name] == "" {
			t.Errorf("%s: args %q, want -metrics-address=$(POD_IP):<port>", ctr.Name, ctr.Args)
		}
		if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}) {
			t.Errorf("%s: no POD_IP from status.podIP: %v", ctr.Name, ctr.Env)
		}
	}
	pm := find(t, objs, "PodMonitor", "netdra-node")
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	for _, ip := range []string{"10.1.2.3", "fd00::3"} {
		scraped := map[string]string{} // container: the address scraped
		for i, e := range eps {
			cfgs := relabelings(t, e.(map[string]any))
			for _, c := range containers {
				// A container without ports: one target, at the pod's IP.
				lb := labels.NewBuilder(labels.FromStrings("__address__", ip,
					"__meta_kubernetes_pod_container_name", c, "__meta_kubernetes_pod_ip", ip))
				if !relabel.ProcessBuilder(lb, cfgs...) {
					continue
				}
				if prev, ok := scraped[c]; ok {
					t.Errorf("endpoint %d scrapes %s again (already at %s)", i, c, prev)
				}
				scraped[c] = lb.Get("__address__")
			}
		}
		want := map[string]string{}
		for c, port := range ports {
			want[c] = net.JoinHostPort(ip, port)
		}
		if !maps.Equal(scraped, want) {
			t.Errorf("pod IP %s: the PodMonitor scrapes %v, want %v", ip, scraped, want)
		}
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

// relabelings are a PodMonitor endpoint's relabelings as Prometheus reads
// them (the Prometheus Operator's camelCase fields, Prometheus' defaults).
func relabelings(t *testing.T, ep map[string]any) []*relabel.Config {
	t.Helper()
	rs, _ := ep["relabelings"].([]any)
	var cfgs []*relabel.Config
	for _, r := range rs {
		r := r.(map[string]any)
		cfg := relabel.DefaultRelabelConfig
		cfg.NameValidationScheme = model.UTF8Validation
		for _, l := range asStrings(r["sourceLabels"]) {
			cfg.SourceLabels = append(cfg.SourceLabels, model.LabelName(l))
		}
		if re, ok := r["regex"].(string); ok {
			var err error
			if cfg.Regex, err = relabel.NewRegexp(re); err != nil {
				t.Fatalf("relabeling %v: %v", r, err)
			}
		}
		if v, ok := r["targetLabel"].(string); ok {
			cfg.TargetLabel = v
		}
		if v, ok := r["replacement"].(string); ok {
			cfg.Replacement = v
		}
		if v, ok := r["action"].(string); ok {
			cfg.Action = relabel.Action(strings.ToLower(v))
		}
		if err := cfg.Validate(model.UTF8Validation); err != nil {
			t.Fatalf("relabeling %v: %v", r, err)
		}
		cfgs = append(cfgs, &cfg)
	}
	return cfgs
}

// asStrings is a YAML list of strings as []string.
func asStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, s := range l {
		out = append(out, s.(string))
	}
	return out
}
