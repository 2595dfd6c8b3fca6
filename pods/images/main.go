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
	arch     string
	goCmd    string
	services []string
	prov     provenance
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
	var services, epoch string
	fs.StringVar(&c.root, "root", "../..", "the repository")
	fs.StringVar(&c.out, "out", "", "output directory (default <root>/_output/images)")
	fs.StringVar(&c.prefix, "prefix", DefaultPrefix, "image name prefix: images are <prefix>/<service>:<tag>")
	fs.StringVar(&c.tag, "tag", "", "image tag (default the chart's appVersion, "+chartFile+")")
	fs.StringVar(&c.arch, "arch", runtime.GOARCH, "GOARCH of the binaries and the images")
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
	if err := os.MkdirAll(bins, 0o755); err != nil {
		return err
	}
	if err := buildBinaries(ctx, c.goCmd, c.root, bins, c.arch, c.services); err != nil {
		return err
	}
	for _, s := range c.services {
		img, _ := lookup(s)
		res, err := pack(img, bins, c)
		if err != nil {
			return fmt.Errorf("image %s: %w", s, err)
		}
		fmt.Fprintf(stdout, "%-40s %s  %5.1f MB  %s\n", res.name, res.digest, float64(res.size)/1e6, res.path)
	}
	fmt.Fprintf(stdout, "%d images in %s (%s, %s)\n", len(c.services), time.Since(t0).Round(100*time.Millisecond), c.prov.version, c.prov.created.Format(time.RFC3339))
	return nil
}

// buildTags are the shipped binaries' build tags (the Makefile's GO_TAGS):
// grpcnotrace leaves grpc's x/net/trace and html/template out, 19.6 of
// dra's 53.4 MB of code.
const buildTags = "grpcnotrace"

// buildBinaries builds the services' binaries (with their images' extra
// programs) into dir with one go build: static (CGO_ENABLED=0), with
// buildTags, without this machine's paths (-trimpath) and without symbol
// tables (-s -w).
func buildBinaries(ctx context.Context, goCmd, root, dir, arch string, services []string) error {
	args := []string{"build", "-tags", buildTags, "-trimpath", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
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

// packed is one written archive.
type packed struct {
	name, digest, path string
	size               int64
}

// pack writes the image of img, whose binaries are in dir, to
// <c.out>/<service>.tar.
func pack(img image, dir string, c config) (packed, error) {
	name, err := imageName(c.prefix, img.service, c.tag)
	if err != nil {
		return packed{}, err
	}
	layer, err := newLayer(img, dir, c.prov.created)
	if err != nil {
		return packed{}, err
	}
	oci, err := newImage(img, layer, c.arch, c.prov)
	if err != nil {
		return packed{}, err
	}
	digest, err := oci.Digest()
	if err != nil {
		return packed{}, err
	}
	out := filepath.Join(c.out, img.service+".tar")
	if err := writeArchive(oci, name, c.arch, c.prov.created, out); err != nil {
		return packed{}, err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return packed{}, err
	}
	return packed{name: name.String(), digest: digest.String(), path: out, size: fi.Size()}, nil
}
