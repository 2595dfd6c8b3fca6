// Command images builds netdra's five images without a container engine
// (make images): each service's static binary on an empty base with
// distroless's users, the uid, entrypoint and OCI labels pods/Dockerfile
// gives the same image, written as one OCI image layout archive per service
// (<out>/<service>.tar) that `ctr images import` reads. The archives are
// reproducible: the same commit (and SOURCE_DATE_EPOCH) gives the same
// bytes. It is a module of its own so that go-containerregistry stays out
// of the product's go.mod.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// config is one run's settings, from the flags.
type config struct {
	root     string // the repository
	out      string // where <service>.tar and bin/ go
	prefix   string
	tag      string
	archs    []string // GOARCH of each image; more than one makes an index
	index    bool     // an OCI index even for one arch
	push     bool     // push each image to <prefix>/<service>:<tag>
	goCmd    string
	services []string
	prov     provenance
	release  releaseConfig
}

// DefaultPrefix is where the images are published, the chart's default
// image.registry: images are <prefix>/<service>:<tag>.
const DefaultPrefix = "ghcr.io/netdra"

// chartFile is the Helm chart's Chart.yaml, relative to the repository: its
// appVersion is the images' default tag, the one the chart and pods/base
// ask for.
const chartFile = "pods/chart/netdra/Chart.yaml"

// DefaultLicenses is the SPDX expression of the repository's LICENSE file,
// the images' org.opencontainers.image.licenses label unless -licenses
// says otherwise.
const DefaultLicenses = "Apache-2.0"

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var c config
	var services, epoch, archs string
	fs.StringVar(&c.root, "root", "../..", "the repository")
	fs.StringVar(&c.out, "out", "", "output directory (default <root>/_output/images)")
	fs.StringVar(&c.prefix, "prefix", DefaultPrefix, "image name prefix: images are <prefix>/<service>:<tag>")
	fs.StringVar(&c.tag, "tag", "", "image tag (default the chart's appVersion, "+chartFile+")")
	fs.StringVar(&archs, "arch", runtime.GOARCH, "comma-separated GOARCHes of the binaries and images; more than one makes each image an OCI index")
	fs.BoolVar(&c.index, "index", false, "make each image an OCI index even for one -arch")
	fs.BoolVar(&c.push, "push", false, "push each image to <prefix>/<service>:<tag> (credentials from the Docker config; plain HTTP to a registry on localhost)")
	fs.StringVar(&c.release.version, "release", "", "make a release of this version (vX.Y.Z): every image an OCI index, and the chart packaged into <out>/ with that version, its images' digests and -prefix as its registry (pushed with -push)")
	fs.StringVar(&c.release.helm, "helm", "helm", "the helm command (-release)")
	fs.StringVar(&c.goCmd, "go", "go", "the go command")
	fs.StringVar(&services, "services", "", "comma-separated services to build (default all)")
	fs.StringVar(&c.prov.source, "source", "https://github.com/netdra/netdra", "org.opencontainers.image.source")
	fs.StringVar(&c.prov.version, "version", "", "org.opencontainers.image.version (default git describe --tags --always --dirty)")
	fs.StringVar(&c.prov.revision, "revision", "", "org.opencontainers.image.revision (default git rev-parse HEAD)")
	fs.StringVar(&c.prov.licenses, "licenses", DefaultLicenses, "org.opencontainers.image.licenses (SPDX)")
	fs.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the images' time, seconds since 1970 (default $SOURCE_DATE_EPOCH, else the commit's time)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.root, err = filepath.Abs(c.root); err != nil {
		return c, err
	}
	if c.out == "" {
		c.out = filepath.Join(c.root, "_output", "images")
	}
	if c.tag == "" {
		if c.tag, err = appVersion(c.root); err != nil {
			return c, err
		}
	}
	if c.services, err = selectServices(services); err != nil {
		return c, err
	}
	if c.archs, err = selectArchs(archs); err != nil {
		return c, err
	}
	if c.release.version != "" {
		if err := c.release.check(); err != nil {
			return c, err
		}
		c.tag, c.index = c.release.version, true
		if c.prov.version == "" {
			c.prov.version = c.release.version
		}
	}
	return c, fillProvenance(c.root, &c.prov, epoch)
}

// appVersion is the chart's appVersion, the release the repository is at.
func appVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, chartFile))
	if err != nil {
		return "", fmt.Errorf("the default tag: %w", err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil || chart.AppVersion == "" {
		return "", fmt.Errorf("the default tag: %s has no appVersion (%v)", chartFile, err)
	}
	return chart.AppVersion, nil
}

// goarches are the architectures an image may be built for: those
// Kubernetes nodes run and the provisioner's netlink code is built for.
var goarches = map[string]bool{"amd64": true, "arm64": true}

func selectArchs(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range strings.Split(list, ",") {
		if !goarches[a] {
			return nil, fmt.Errorf("-arch: %q is not one of amd64, arm64", a)
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

func selectServices(list string) ([]string, error) {
	if list == "" {
		var all []string
		for _, i := range images {
			all = append(all, i.service)
		}
		return all, nil
	}
	var out []string
	for _, s := range strings.Split(list, ",") {
		if _, ok := lookup(s); !ok {
			return nil, fmt.Errorf("no image for service %q", s)
		}
		out = append(out, s)
	}
	return out, nil
}

// fillProvenance sets what the flags left empty from git.
func fillProvenance(root string, p *provenance, epoch string) error {
	var err error
	if p.revision == "" {
		if p.revision, err = git(root, "rev-parse", "HEAD"); err != nil {
			return err
		}
	}
	if p.version == "" {
		if p.version, err = git(root, "describe", "--tags", "--always", "--dirty"); err != nil {
			return err
		}
	}
	if epoch == "" {
		if epoch, err = git(root, "log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("epoch %q: %w", epoch, err)
	}
	p.created = time.Unix(sec, 0).UTC()
	return nil
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s (set -version, -revision and SOURCE_DATE_EPOCH outside a git checkout): %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	t0 := time.Now()
	bins := filepath.Join(c.out, "bin")
	for _, arch := range c.archs {
		dir := binDirOf(bins, arch, c.archs)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := buildBinaries(ctx, c.goCmd, c.root, dir, arch, c.prov.version, c.services); err != nil {
			return err
		}
	}
	digests := map[string]string{}
	for _, s := range c.services {
		img, _ := lookup(s)
		res, err := pack(img, bins, c)
		if err != nil {
			return fmt.Errorf("image %s: %w", s, err)
		}
		if c.push {
			if err := push(ctx, res); err != nil {
				return fmt.Errorf("image %s: %w", s, err)
			}
		}
		digests[s] = res.digest
		fmt.Fprintf(stdout, "%-40s %s  %5.1f MB  %s\n", res.name, res.digest, float64(res.size)/1e6, res.path)
	}
	fmt.Fprintf(stdout, "%d images for %s in %s (%s, %s)\n", len(c.services), strings.Join(c.archs, ","), time.Since(t0).Round(100*time.Millisecond), c.prov.version, c.prov.created.Format(time.RFC3339))
	if c.release.version != "" {
		return c.release.packageChart(ctx, c, digests, stdout)
	}
	return nil
}

// binDirOf is where the binaries for arch are built: dir itself for a
// single-architecture build (the layout make images always had), else
// dir/<arch>.
func binDirOf(dir, arch string, archs []string) string {
	if len(archs) == 1 {
		return dir
	}
	return filepath.Join(dir, arch)
}

// buildTags are the shipped binaries' build tags (the Makefile's GO_TAGS):
// grpcnotrace leaves grpc's x/net/trace and html/template out, a large
// share of dra's code.
const buildTags = "grpcnotrace"

// versionVar is the variable the binaries' version is linked into.
const versionVar = "github.com/netdra/netdra/shared/process.version"

// buildBinaries builds the services' binaries (with their images' extra
// programs) into dir with one go build: static (CGO_ENABLED=0), with
// buildTags, without this machine's paths (-trimpath) and without symbol
// tables (-s -w), their version (process.Version) set to version.
func buildBinaries(ctx context.Context, goCmd, root, dir, arch, version string, services []string) error {
	args := []string{"build", "-tags", buildTags, "-trimpath", "-ldflags=-s -w -X " + versionVar + "=" + version, "-o", dir + string(filepath.Separator)}
	for _, s := range services {
		img, ok := lookup(s)
		if !ok {
			return fmt.Errorf("no image for service %q", s)
		}
		for _, p := range img.programs() {
			args = append(args, p.pkg)
		}
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", strings.Join(services, " "), err)
	}
	return nil
}

// packed is one written archive: an image, or an index of one image per
// architecture.
type packed struct {
	name, digest, path string
	size               int64
	ref                reference.NamedTagged
	artifact           artifact
}

// pack writes the image of img, whose binaries are under dir (binDirOf),
// to <c.out>/<service>.tar: one image for a single arch, else (or with
// c.index) an OCI index of one image per arch.
func pack(img image, dir string, c config) (packed, error) {
	name, err := imageName(c.prefix, img.service, c.tag)
	if err != nil {
		return packed{}, err
	}
	var images []v1.Image
	for _, arch := range c.archs {
		layer, err := newLayer(img, binDirOf(dir, arch, c.archs), c.prov.created)
		if err != nil {
			return packed{}, err
		}
		oci, err := newImage(img, layer, arch, c.prov)
		if err != nil {
			return packed{}, err
		}
		images = append(images, oci)
	}
	a, err := newArtifact(images, c.archs, c.index || len(c.archs) > 1)
	if err != nil {
		return packed{}, err
	}
	digest, err := a.Digest()
	if err != nil {
		return packed{}, err
	}
	out := filepath.Join(c.out, img.service+".tar")
	if err := writeArchive(a, name, c.prov.created, out); err != nil {
		return packed{}, err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return packed{}, err
	}
	return packed{name: name.String(), digest: digest.String(), path: out, size: fi.Size(), ref: name, artifact: a}, nil
}
