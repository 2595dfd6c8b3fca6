package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/distribution/reference"
)

// releaseConfig is -release's: the version and the helm that packages
// the chart.
type releaseConfig struct {
	version string // vX.Y.Z[-pre]: the images' tag and the chart's appVersion
	helm    string
}

// releaseVersion is what -release accepts: a v, then a SemVer 2 version
// without build metadata (Helm's chart version is the same without the v;
// "+" is not valid in an image tag).
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// check refuses a version that is not releaseVersion.
func (r releaseConfig) check() error {
	if !releaseVersion.MatchString(r.version) {
		return fmt.Errorf("-release %q: want vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. v0.4.0", r.version)
	}
	return nil
}

// chartDir is the chart's source, relative to the repository.
const chartDir = "pods/chart/netdra"

// packageChart writes <c.out>/netdra-<version>.tgz: the chart with
// version and appVersion set to the release's, image.registry set to
// c.prefix, and each image pinned to the digest the release built
// (digests, by service); with c.push it pushes it to
// oci://<c.prefix>/charts. It also writes <c.out>/images.txt, one
// name:tag@digest per image.
func (r releaseConfig) packageChart(ctx context.Context, c config, digests map[string]string, stdout io.Writer) error {
	work := filepath.Join(c.out, "chart")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	dst := filepath.Join(work, "netdra")
	if err := copyTree(filepath.Join(c.root, chartDir), dst); err != nil {
		return fmt.Errorf("copying the chart: %w", err)
	}
	chartVersion := strings.TrimPrefix(r.version, "v")
	if err := edit(filepath.Join(dst, "Chart.yaml"), []substitution{
		{regexp.MustCompile(`(?m)^version: .*$`), "version: " + chartVersion},
		{regexp.MustCompile(`(?m)^appVersion: .*$`), fmt.Sprintf("appVersion: %q", r.version)},
	}); err != nil {
		return err
	}
	subs := []substitution{{regexp.MustCompile(`(?m)^(image:\n(?:  #.*\n)*  registry: ).*$`), "${1}" + c.prefix}}
	var lines []string
	for _, s := range sortedKeys(digests) {
		subs = append(subs, substitution{
			regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(s) + `: \{registry: "", tag: "", digest: ""\}$`),
			fmt.Sprintf(`  %s: {registry: "", tag: "", digest: %q}`, s, digests[s]),
		})
		name, err := imageName(c.prefix, s, c.tag)
		if err != nil {
			return err
		}
		lines = append(lines, name.String()+"@"+digests[s])
	}
	if err := edit(filepath.Join(dst, "values.yaml"), subs); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.out, "images.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if err := r.run(ctx, "package", dst, "--destination", c.out); err != nil {
		return err
	}
	tgz := filepath.Join(c.out, "netdra-"+chartVersion+".tgz")
	fmt.Fprintf(stdout, "chart %s (version %s, appVersion %s, images under %s pinned by digest)\n", tgz, chartVersion, r.version, c.prefix)
	if !c.push {
		return nil
	}
	repo, plain, err := chartRepository(c.prefix)
	if err != nil {
		return err
	}
	args := []string{"push", tgz, repo}
	if plain {
		args = append(args, "--plain-http")
	}
	if err := r.run(ctx, args...); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s/netdra:%s\n", repo, chartVersion)
	return nil
}

// chartRepository is the OCI repository the chart is pushed to,
// oci://<prefix>/charts, and whether helm must speak plain HTTP to it (a
// registry on a loopback address, as go-containerregistry does for the
// images).
func chartRepository(prefix string) (repo string, plainHTTP bool, err error) {
	named, err := reference.ParseNormalizedNamed(prefix + "/netdra")
	if err != nil {
		return "", false, fmt.Errorf("-prefix %q: %w", prefix, err)
	}
	domain := reference.Domain(named)
	host := domain
	if h, _, err := net.SplitHostPort(domain); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	plainHTTP = host == "localhost" || ip != nil && ip.IsLoopback()
	return "oci://" + domain + "/" + strings.TrimSuffix(reference.Path(named), "/netdra") + "/charts", plainHTTP, nil
}

func (r releaseConfig) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, r.helm, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", r.helm, strings.Join(args, " "), err)
	}
	return nil
}

// substitution replaces what re matches, which must match exactly once.
type substitution struct {
	re   *regexp.Regexp
	repl string
}

// edit applies subs to the file at path. A substitution that matches
// nothing or more than once is an error: the chart no longer has the line
// a release rewrites.
func edit(path string, subs []substitution) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if n := len(s.re.FindAllIndex(b, -1)); n != 1 {
			return fmt.Errorf("%s: %s matches %d times, want once", path, s.re, n)
		}
		b = s.re.ReplaceAll(b, []byte(s.repl))
	}
	return os.WriteFile(path, b, 0o644)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
}
