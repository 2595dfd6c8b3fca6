// Command chartgen writes what is generated from netdra's Helm chart
// (pods/chart/netdra), the one source of netdra's manifests:
//
//   - the table of values in the chart's README.md, from values.yaml and
//     its comments (the comment above a key describes it);
//   - files/claim-validations.yaml, the validations of the claims'
//     admission policy, from shared/claimconfig;
//   - pods/base, the kustomize base: the chart rendered by helm template
//     with its default values into the namespace netdra-system, which it
//     makes (namespace.create=true), one file per template, and a
//     kustomization.yaml listing them.
//
// make manifests runs it (make generate with it); -check writes nothing
// and fails when a file is not what it would write.
//
//	chartgen [-root DIR] [-helm PATH] [-check]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

// Paths relative to the repository.
const (
	chartDir = "pods/chart/netdra"
	baseDir  = "pods/base"
)

// BaseNamespace is the namespace pods/base installs into.
const BaseNamespace = "netdra-system"

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("chartgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "the repository")
	helm := fs.String("helm", "helm", "the helm binary (the Makefile's pinned one)")
	check := fs.Bool("check", false, "write nothing; fail when a generated file is stale")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	files := map[string][]byte{}
	readme, err := ChartREADME(*root)
	if err != nil {
		return err
	}
	files[filepath.Join(chartDir, "README.md")] = readme
	validations, err := ClaimValidations()
	if err != nil {
		return err
	}
	files[claimValidationsFile] = validations
	if !*check {
		// The chart includes it: written first, pods/base renders it.
		if err := os.WriteFile(filepath.Join(*root, claimValidationsFile), validations, 0o644); err != nil {
			return err
		}
	}
	base, err := Base(*root, *helm)
	if err != nil {
		return err
	}
	for name, b := range base {
		files[filepath.Join(baseDir, name)] = b
	}
	bad, err := sync(*root, files, *check)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("not what the chart generates (run make manifests): %s", strings.Join(bad, ", "))
	}
	return nil
}

// sync makes the files under root what files holds (path from root ->
// content) and removes the YAML files of pods/base that files does not
// hold; with check it writes nothing and returns the paths that differ
// or would be removed instead.
func sync(root string, files map[string][]byte, check bool) (bad []string, err error) {
	// Files of pods/base that the chart no longer renders.
	old, err := filepath.Glob(filepath.Join(root, baseDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, f := range old {
		rel, _ := filepath.Rel(root, f)
		if _, ok := files[rel]; !ok {
			stale = append(stale, rel)
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		cur, err := os.ReadFile(filepath.Join(root, n))
		if err == nil && bytes.Equal(cur, files[n]) {
			continue
		}
		if check {
			bad = append(bad, n)
			continue
		}
		if err := os.WriteFile(filepath.Join(root, n), files[n], 0o644); err != nil {
			return nil, err
		}
	}
	for _, n := range stale {
		if check {
			bad = append(bad, n+" (the chart renders no such file)")
			continue
		}
		if err := os.Remove(filepath.Join(root, n)); err != nil {
			return nil, err
		}
	}
	return bad, nil
}

// Base renders the chart as pods/base: file name -> content.
func Base(root, helm string) (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "chartgen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(helm, "template", "netdra", filepath.Join(root, chartDir),
		"--namespace", BaseNamespace, "--set", "namespace.create=true", "--output-dir", dir)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	rendered, err := filepath.Glob(filepath.Join(dir, "netdra", "templates", "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(rendered) == 0 {
		return nil, fmt.Errorf("helm template wrote no file into %s", dir)
	}
	out := map[string][]byte{}
	var names []string
	for _, f := range rendered {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(f)
		header := fmt.Sprintf("# Generated from %s/templates/%s by make manifests: edit the chart, not this file.\n", chartDir, name)
		out[name] = append([]byte(header), b...)
		names = append(names, name)
	}
	slices.Sort(names)
	var k bytes.Buffer
	fmt.Fprintf(&k, `# Generated by make manifests: netdra's kustomize base is the Helm chart
# %s rendered with its default values into the namespace %s
# (which it makes, labelled for Pod Security privileged). Install with
#   kubectl apply --server-side -k pods/base
# and change it with an overlay of your own (docs/install.md, Install).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
`, chartDir, BaseNamespace)
	for _, n := range names {
		fmt.Fprintf(&k, "  - %s\n", n)
	}
	out["kustomization.yaml"] = k.Bytes()
	return out, nil
}
