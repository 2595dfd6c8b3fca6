package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden reports of testdata from what this code renders")

// unstable are the report's lines that depend on the moment and the
// machine it is rendered on, not on the records.
var unstable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC`), "DATE"},
	{regexp.MustCompile(`(?m)^\| (CPU|memory|kernel|Go) \| [^|\n]* \|$`), "| $1 | (the machine's) |"},
}

// golden compares the report at path, its unstable lines masked, with
// the golden file want (or, with -update, writes it there).
func golden(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := b
	for _, u := range unstable {
		got = u.re.ReplaceAll(got, []byte(u.with))
	}
	if *update {
		if err := os.WriteFile(want, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(w), string(got)); diff != "" {
		t.Errorf("%s against %s (-want +got):\n%s", path, want, diff)
	}
}

// TestReport_Golden: make bench's report of the fixed records of
// testdata/run, set beside the repository's targets, is
// testdata/RESULTS.golden.md.
func TestReport_Golden(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "RESULTS.md")
	if err := run("testdata/run", out, filepath.Join(dir, "latency.png"), repoTargets, 42*time.Minute); err != nil {
		t.Fatal(err)
	}
	golden(t, out, "testdata/RESULTS.golden.md")
}

// TestScale_Golden: make bench-scale's section of the fixed records of
// testdata/scale is testdata/scale.golden.md.
func TestScale_Golden(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "RESULTS.md")
	if err := runScale("testdata/scale", out, filepath.Join(dir, "scale.png"), repoTargets, 42*time.Minute); err != nil {
		t.Fatal(err)
	}
	golden(t, out, "testdata/scale.golden.md")
}
