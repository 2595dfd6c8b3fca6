package boundaries

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/netdra/netdra/services/dra/cdispec"
	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/shared/process"
)

// defaultRow is a sentence of a page that states a default or a setting
// in words: re matches it, its groups are the values, in want's order.
type defaultRow struct {
	file string
	re   string
	want []string
}

// flagDefault is the one literal default program gives its flag.
func flagDefault(t *testing.T, defaults map[string]map[string][]string, program, flag string) string {
	t.Helper()
	ds := defaults[program][flag]
	if len(ds) != 1 {
		t.Fatalf("%s's -%s: defaults %q, want one literal", program, flag, ds)
	}
	return ds[0]
}

// makeDefault is a Makefile variable's default, a $(VAR) of another
// variable's default resolved.
func makeDefault(t *testing.T, mk makefile, name string) string {
	t.Helper()
	d, ok := mk.defaults[name]
	if !ok {
		t.Fatalf("the Makefile gives %s no default (VAR ?= value)", name)
	}
	if m := regexp.MustCompile(`^\$\(([A-Z_]+)\)$`).FindStringSubmatch(d); m != nil {
		return makeDefault(t, mk, m[1])
	}
	return d
}

// TestDocsDefaults checks the defaults and settings the docs state in
// words against their source: a flag's default as its program defines
// it, a Makefile variable's default, a constant of the code, a test's
// own setting.
func TestDocsDefaults(t *testing.T) {
	root := moduleRoot(t)
	_, defaults := programFlagsAndDefaults(t, root)
	mk := readMakefile(t, root)
	metrics := func(program string) (string, string) {
		host, port, ok := strings.Cut(flagDefault(t, defaults, program, "metrics-address"), ":")
		if !ok {
			t.Fatalf("%s's -metrics-address default has no port", program)
		}
		return host, port
	}
	draHost, draPort := metrics("dra")
	nriHost, nriPort := metrics("nri")
	stateHost, statePort := metrics("state")
	provHost, provPort := metrics("provisioner")
	if draHost != nriHost || draHost != stateHost || draHost != provHost {
		t.Errorf("the processes' metrics hosts differ (%s, %s, %s, %s): docs/operations.md gives one", draHost, nriHost, stateHost, provHost)
	}
	onOff := map[string]string{"true": "on", "false": "off"}
	soakWarmup := codeNumbers(t, root, "shared/testinfra/testworld/e2e/soak_test.go", `soakWarmupLifecycles = (\d+)`)[0]
	itoa := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	rows := []defaultRow{
		{"docs/operations.md", `on ([\d.]+) by default: dra :(\d+),\s+nri :(\d+), state :(\d+), the provisioner :(\d+)\.`,
			[]string{draHost, draPort, nriPort, statePort, provPort}},
		{"docs/architecture.md", `on -metrics-address, ([\d.:]+) by default`, []string{draHost + ":" + draPort}},
		{"docs/architecture.md", `metrics on ([\d.:]+) by`, []string{nriHost + ":" + nriPort}},
		{"docs/operations.md", "`-metrics-addr`, ([\\d.:]+)\\)", []string{flagDefault(t, defaults, "operator", "metrics-addr")}},
		{"docs/architecture.md", "`-gc-percent` \\(default (\\d+),", []string{strconv.Itoa(process.DefaultGCPercent)}},
		{"docs/architecture.md", "`-kube-api-qps (\\d+) -kube-api-burst (\\d+)`, the kubelet's",
			[]string{flagDefault(t, defaults, "dra", "kube-api-qps"), flagDefault(t, defaults, "dra", "kube-api-burst")}},
		{"docs/architecture.md", "`-kube-api-qps (\\d+) -kube-api-burst (\\d+)`, as dra's",
			[]string{flagDefault(t, defaults, "operator", "kube-api-qps"), flagDefault(t, defaults, "operator", "kube-api-burst")}},
		{"docs/architecture.md", `client-go's default of (\d+) a second`, []string{itoa(float64(rest.DefaultQPS))}},
		{"docs/architecture.md", "`-refresh`, (\\w+)\\)", []string{strings.TrimSuffix(controller.DefaultRefresh.String(), "0s")}},
		{"docs/architecture.md", `governs, (\d+) writes in flight`, []string{itoa(codeNumbers(t, root, "services/operator/controller/controller.go", `writeParallelism = (\d+)`)[0])}},
		{"docs/architecture.md", "`-dev-root` \\(default `([^`]+)`\\)", []string{sriov.DefaultDevRoot}},
		{"docs/architecture.md", "`([^`]+)` \\(`-cdi-dir`\\)", []string{cdispec.DefaultDir}},
		{"docs/architecture.md", "\\(`CHAOS_LIFECYCLES`, default (\\d+);", []string{makeDefault(t, mk, "CHAOS_LIFECYCLES")}},
		{"docs/install.md", "`CTR` defaults to `([^`]+)`", []string{makeDefault(t, mk, "CTR")}},
		{"docs/install.md", "\\(`RELEASE_ARCHS`,\\s+`([^`]+)` by default", []string{makeDefault(t, mk, "RELEASE_ARCHS")}},
		{"docs/install.md", "`RELEASE_REGISTRY` \\(default `([^`]+)`\\)", []string{makeDefault(t, mk, "RELEASE_REGISTRY")}},
		{"docs/install.md", "`IMAGE_LICENSES`, ([\\w.-]+) by default", []string{makeDefault(t, mk, "IMAGE_LICENSES")}},
		{"docs/testing.md", "`([^`]+)` \\(`DEV_DIR`\\)", []string{makeDefault(t, mk, "DEV_DIR")}},
		{"docs/testing.md", "\\(`SCALE_COMPONENT_QPS`, (\\d+) as", []string{makeDefault(t, mk, "SCALE_COMPONENT_QPS")}},
		{"docs/testing.md", "SCALE_NODES=\"([\\d ]+)\"`", []string{makeDefault(t, mk, "SCALE_NODES")}},
		{"docs/operations.md", "`metrics.prometheusRule.poolFreeRatio` \\(([\\d.]+)\\)", []string{chartValue(t, root, "metrics.prometheusRule.poolFreeRatio")}},
		{"docs/operations.md", "`metrics.prometheusRule.restarts` \\((\\d+)\\)", []string{chartValue(t, root, "metrics.prometheusRule.restarts")}},
		{"docs/claims.md", "\\(`claimPolicy.enabled`,\\s+(on|off) by default\\)", []string{onOff[chartValue(t, root, "claimPolicy.enabled")]}},
		{"docs/operations.md", "The chart also makes, each (on|off) by default, a PodMonitor\\s+\\(`metrics.podMonitor.enabled`\\), a PrometheusRule\\s+\\(`metrics.prometheusRule.enabled`",
			[]string{onOff[chartValue(t, root, "metrics.podMonitor.enabled")]}},
		{"docs/operations.md", "each (on|off) by default, a PodMonitor", []string{onOff[chartValue(t, root, "metrics.prometheusRule.enabled")]}},
		{"docs/operations.md", "each (on|off) by default, a PodMonitor", []string{onOff[chartValue(t, root, "metrics.grafanaDashboard.enabled")]}},
		{"docs/testing.md", "`SOAK_WARMUP_LIFECYCLES`, (\\d+) by default", []string{itoa(soakWarmup)}},
		{"docs/testing.md", "for `SOAK_DURATION`\\s+\\(default (an hour);", []string{hourWords(t, makeDefault(t, mk, "SOAK_DURATION"))}},
	}
	for _, r := range rows {
		b, err := os.ReadFile(filepath.Join(root, r.file))
		if err != nil {
			t.Fatal(err)
		}
		ms := regexp.MustCompile(r.re).FindAllStringSubmatch(string(b), -1)
		if len(ms) == 0 {
			t.Errorf("%s no longer says %q: update the sentence or this test", r.file, r.re)
			continue
		}
		for _, m := range ms {
			for i, w := range r.want {
				if m[i+1] != w {
					t.Errorf("%s says %q: %q where the source says %q", r.file, m[0], m[i+1], w)
				}
			}
		}
	}
	t.Logf("checked %d sentences stating defaults", len(rows))
}

// chartValue is the default values.yaml gives the value at path (dotted),
// as YAML writes it.
func chartValue(t *testing.T, root, path string) string {
	t.Helper()
	var v any = readYAMLDocs(t, filepath.Join(root, "pods/chart/netdra/values.yaml"))[0]
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("values.yaml has no %s", path)
		}
		if v, ok = m[k]; !ok {
			t.Fatalf("values.yaml has no %s", path)
		}
	}
	return fmt.Sprint(v)
}

// hourWords says a whole number of hours as the docs do: "an hour",
// "2 hours".
func hourWords(t *testing.T, d string) string {
	t.Helper()
	v, err := time.ParseDuration(d)
	if err != nil || v%time.Hour != 0 {
		t.Fatalf("%q is no whole number of hours", d)
	}
	if v == time.Hour {
		return "an hour"
	}
	return strconv.Itoa(int(v/time.Hour)) + " hours"
}
