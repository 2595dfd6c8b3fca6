// Package promtool runs Prometheus' promtool on the chart's alert rules in
// the test world's tests, as an operator checks rules before loading them:
// `promtool check rules` and `promtool test rules` on rule files the tests
// write. The binary is $PROMTOOL (the Makefile's pinned copy in
// .tools/bin) or, outside CI, promtool installed from its Go module into
// the user cache, never a prebuilt binary.
package promtool

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/netdra/netdra/shared/testinfra/testworld/internal/pinned"
)

// Package is promtool's main package, pinned by shared/tools/go.mod.
const Package = "github.com/prometheus/prometheus/cmd/promtool"

// Tags are the build tags promtool is built with, the Makefile's
// PROMTOOL_TAGS less netdra's own: no service discovery, which rule
// checks and rule tests never use.
const Tags = "remove_all_sd"

// Env names the environment variable holding the promtool binary.
const Env = "PROMTOOL"

var tool = pinned.Tool{Env: Env, Package: Package, Tags: Tags, Strict: true}

// Binary returns the promtool binary. $PROMTOOL naming no file fails the
// test; so does $PROMTOOL unset under testenv.Strict. Otherwise it is
// built once per test binary from the tools module (minutes cold).
func Binary(t testing.TB) string {
	t.Helper()
	return tool.Binary(t)
}

// RuleFile writes the spec of the PrometheusRule named name, found among
// the YAML documents of rendered (helm template's output), to path as a
// Prometheus rule file (its groups), and returns path. It fails the test
// when rendered holds no such PrometheusRule.
func RuleFile(t testing.TB, rendered []byte, name, path string) string {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(rendered))
	for {
		var doc struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Groups []any `yaml:"groups"`
			}
		}
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("no PrometheusRule %s in the rendered chart (%v)", name, err)
		}
		if doc.Kind != "PrometheusRule" || doc.Metadata.Name != name {
			continue
		}
		b, err := yaml.Marshal(map[string]any{"groups": doc.Spec.Groups})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// Run runs promtool with args and returns its combined output and its
// error (promtool exits non-zero when a check or a rule test fails).
func Run(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}
