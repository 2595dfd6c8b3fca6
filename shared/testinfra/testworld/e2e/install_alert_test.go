package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/netdra/netdra/shared/testinfra/testworld/internal/promtool"
)

// nriDisconnectedFires checks the chart's NetdraNRIDisconnected alert on
// what a Prometheus scraping the node pod would have: nri's
// netdra_nri_runtime_connected scraped on the pod's IP with the real
// node's containerd up, then killed (SIGKILL, as a crash), then started
// again. The three scraped samples, with the labels the chart's PodMonitor
// gives the series, are promtool's input series for the alert rules
// rendered from this tree's chart: the alert is pending, then fires with
// the node's name in its summary, then resolves once nri is back. The
// outage on the node is as short as nri takes to notice it; promtool's
// series hold each sample for the rule's `for`. containerd is running
// again, and nri connected to it, when this returns.
func (in *installer) nriDisconnectedFires(t *testing.T, nodePod *corev1.Pod, helm string) {
	t.Helper()
	bin := promtool.Binary(t)
	url := in.metricsURL(t, nodePod, "nri")
	const metric = "netdra_nri_runtime_connected"
	up := scrapeValue(t, url, metric)
	if up != 1 {
		t.Fatalf("%s on %s is %v before containerd's kill, want 1", metric, url, up)
	}
	t0 := time.Now()
	in.node.Kill("containerd")
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = in.node.RestartContainerd(context.Background())
		}
	})
	var down float64
	waitFor(t, "nri to report containerd gone", 30*time.Second, func(ctx context.Context) (bool, error) {
		down = scrapeValue(t, url, metric)
		return down == 0, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := in.node.RestartContainerd(ctx); err != nil {
		t.Fatalf("starting containerd again: %v", err)
	}
	restarted = true
	var back float64
	waitFor(t, "nri to reconnect to containerd", time.Minute, func(ctx context.Context) (bool, error) {
		back = scrapeValue(t, url, metric)
		return back == 1, nil
	})
	t.Logf("containerd killed and started again; nri disconnected and back in %s", time.Since(t0).Round(time.Millisecond))

	dir := t.TempDir()
	rendered, err := exec.Command(helm, "template", "netdra", filepath.Join(in.repo, "pods/chart/netdra"), "--namespace", in.ns,
		"--set", "metrics.prometheusRule.enabled=true", "--show-only", "templates/monitoring.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	promtool.RuleFile(t, rendered, "netdra", filepath.Join(dir, "rules.yaml"))
	node := nodePod.Spec.NodeName
	// The labels of the chart's PodMonitor: node and netdra_process by its
	// relabelings, namespace, pod and instance as Prometheus' Kubernetes
	// pod discovery gives them.
	labels := map[string]string{"node": node, "netdra_process": "nri", "namespace": nodePod.Namespace, "pod": nodePod.Name,
		"instance": strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")}
	series := metric + "{"
	for i, k := range []string{"instance", "namespace", "netdra_process", "node", "pod"} {
		if i > 0 {
			series += ","
		}
		series += fmt.Sprintf("%s=%q", k, labels[k])
	}
	series += "}"
	firing := map[string]string{"severity": "critical"}
	for k, v := range labels {
		firing[k] = v
	}
	// Scrapes every 30s: up at 0s, down from 30s to 3m30s, back from 4m.
	tests := map[string]any{
		"rule_files":          []string{"rules.yaml"},
		"evaluation_interval": "30s",
		"tests": []any{map[string]any{
			"interval":     "30s",
			"input_series": []any{map[string]string{"series": series, "values": fmt.Sprintf("%g %gx6 %gx2", up, down, back)}},
			"alert_rule_test": []any{
				map[string]any{"eval_time": "1m", "alertname": "NetdraNRIDisconnected", "exp_alerts": []any{}},
				map[string]any{"eval_time": "3m", "alertname": "NetdraNRIDisconnected", "exp_alerts": []any{map[string]any{
					"exp_labels": firing,
					"exp_annotations": map[string]string{
						"summary":     "netdra's nri on " + node + " is not connected to the container runtime",
						"description": "Pods with netdra devices cannot start on " + node + " until nri reconnects to the runtime's NRI socket.",
					},
				}}},
				map[string]any{"eval_time": "4m30s", "alertname": "NetdraNRIDisconnected", "exp_alerts": []any{}},
			},
		}},
	}
	b, err := yaml.Marshal(tests)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "nri.promtest.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool.Run(bin, "test", "rules", file); err != nil {
		t.Fatalf("promtool test rules on the scraped samples: %v\n%s\n%s", err, out, b)
	}
}

// metricsURL is the URL of the metrics of the node pod's container, at
// its -metrics-address port on the pod's IP, as the chart's PodMonitor has
// Prometheus scrape it.
func (in *installer) metricsURL(t *testing.T, nodePod *corev1.Pod, container string) string {
	t.Helper()
	for _, c := range nodePod.Spec.Containers {
		for _, a := range c.Args {
			if port, ok := strings.CutPrefix(a, "-metrics-address=$(POD_IP):"); ok && c.Name == container {
				return fmt.Sprintf("http://%s/metrics", net.JoinHostPort(nodePod.Status.PodIP, port))
			}
		}
	}
	t.Fatalf("the node pod %s's container %s serves no metrics on the pod's IP", nodePod.Name, container)
	return ""
}

// scrapeValue scrapes url and returns the value of the gauge name, which
// must be there once, without labels.
func scrapeValue(t *testing.T, url, name string) float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(httpGet(t, url)))
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	mf := mfs[name]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge() == nil {
		t.Fatalf("%s: %s is %v, want one gauge", url, name, mf)
	}
	return mf.GetMetric()[0].GetGauge().GetValue()
}
