package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository, relative to this package.
const root = "../.."

func TestValues_RowsAndDescend(t *testing.T) {
	src := []byte(`# A file header, not a key's comment.

image:
  # Where the images are.
  registry: r.example.com
  # Their tag.
  tag: ""
# Resources, as one value.
resources:
  requests: {cpu: 10m}
# Counted.
replicas: 2
`)
	got, err := Values(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{
		{"image.registry", "string", `"r.example.com"`, "Where the images are."},
		{"image.tag", "string", `""`, "Their tag."},
		{"resources", "object", `{"requests":{"cpu":"10m"}}`, "Resources, as one value."},
		{"replicas", "int", "2", "Counted."},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestValues_UndocumentedKeyRefused(t *testing.T) {
	_, err := Values([]byte("image:\n  # Documented.\n  registry: r\n  tag: x\nreplicas: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "image.tag") || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("got %v, want an error naming image.tag and replicas", err)
	}
}

func TestTable_EscapesCells(t *testing.T) {
	got := Table([]Value{{"a", "string", `"x|y"`, "Is <name>|other."}})
	if !strings.Contains(got, "| `a` | string | `\"x\\|y\"` | Is &lt;name&gt;\\|other. |") {
		t.Errorf("table:\n%s", got)
	}
}

// TestChartREADME_UpToDate: the chart's README.md has the table values.yaml
// gives (make manifests writes it).
func TestChartREADME_UpToDate(t *testing.T) {
	want, err := ChartREADME(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s/README.md is stale: run make manifests", chartDir)
	}
}

// TestBase_UpToDate: pods/base is the chart rendered as make manifests
// renders it. It needs the pinned helm ($HELM, or the Makefile's
// .tools/bin/helm: make tools).
func TestBase_UpToDate(t *testing.T) {
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(root, ".tools", "bin", "helm")
	}
	if _, err := exec.LookPath(helm); err != nil {
		t.Skipf("no helm at %s (make tools, or set HELM); deploytest's TestChart_MatchesBase checks pods/base too", helm)
	}
	if err := run([]string{"-root", root, "-helm", helm, "-check"}, os.Stderr); err != nil {
		t.Error(err)
	}
}
