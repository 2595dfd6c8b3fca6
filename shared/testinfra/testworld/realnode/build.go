package realnode

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
)

// Image references of the two images the node imports: no registry is
// reachable, so both are built here from Go sources and never pulled.
const (
	PauseImage   = "localhost/netdra-realnode/pause:1"
	TestAppImage = "localhost/netdra-realnode/testapp:1"
)

// Binaries are the programs a real node runs, built from module sources.
type Binaries struct {
	Dir    string // kubelet, kubectl, containerd, ctr, containerd-shim-runc-v2, pause, testapp
	CNIDir string // loopback, bridge, host-local
	Runc   string // Debian's runc
	Images string // pause.tar and testapp.tar: OCI archives for ctr images import
	// Crio and Conmon are CRI-O's (in Dir) and Debian's conmon, set by
	// BuildCRIO; empty after Build alone.
	Crio, Conmon string
}

// Kubelet, Containerd and Ctr are the binaries' paths.
func (b *Binaries) Kubelet() string    { return filepath.Join(b.Dir, "kubelet") }
func (b *Binaries) Containerd() string { return filepath.Join(b.Dir, "containerd") }
func (b *Binaries) Ctr() string        { return filepath.Join(b.Dir, "ctr") }

// Kubectl is kubectl v1.37.2, built from k8s.io/kubernetes as the kubelet
// is: what the end-to-end tests run the documentation's commands with.
func (b *Binaries) Kubectl() string { return filepath.Join(b.Dir, "kubectl") }

// CacheDirEnv names the environment variable that moves the build cache
// (default <user cache dir>/netdra-realnode).
const CacheDirEnv = "REALNODE_CACHE"

// containerdTags are containerd's build tags for static binaries without
// the snapshotters this machine has no use for. containerd's own release
// tags osusergo and netgo are left out: with CGO_ENABLED=0 they change
// nothing in the binary, but a tag is in the cache key of every package
// it selects files of and all above them, so they would compile net,
// crypto/x509, net/http and everything on top once more than the test
// world does. grpcnotrace is make's GO_TAGS, which -tags here replaces.
const containerdTags = "urfave_cli_no_docs no_btrfs no_devmapper no_zfs static_build grpcnotrace"

// Build builds (or finds up to date) every binary of the real node and its
// two images: the kubelet and kubectl from k8s.io/kubernetes v1.37.2 (this
// module's requirement, both `tool`s of its go.mod), containerd, ctr and the runc shim v2.4.2 and the CNI
// plugins v1.10.0 from the modules under tools/, the pause and test-app
// images from images/. All static (CGO_ENABLED=0) but the kubelet, which
// shares its build with the testworld binary's. runc comes from Debian
// (apt-get install runc; `make test-world` installs it). go install relinks
// only what changed: the first build takes minutes (the kubelet compiles
// much of Kubernetes), a warm one seconds. Concurrent callers are serialized
// by a file lock. Progress lines go to logger.
func Build(ctx context.Context, logger *slog.Logger) (*Binaries, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("runc not found: install Debian's (apt-get install runc; make test-world does): %w", err)
	}
	src, err := controlplane.ModuleDir()
	if err != nil {
		return nil, err
	}
	cache, b, err := cacheDirs(runc)
	if err != nil {
		return nil, err
	}
	unlock, err := controlplane.LockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	t0 := time.Now()
	for _, s := range buildSteps(src, b) {
		if err := s.run(ctx, logger); err != nil {
			return nil, err
		}
	}
	for _, img := range []struct{ bin, ref string }{{"pause", PauseImage}, {"testapp", TestAppImage}} {
		if err := writeImage(filepath.Join(b.Dir, img.bin), "/"+img.bin, img.ref, filepath.Join(b.Images, img.bin+".tar")); err != nil {
			return nil, fmt.Errorf("image %s: %w", img.ref, err)
		}
	}
	if d := time.Since(t0); d > 10*time.Second {
		logger.Info("real node's binaries ready", "took", d.Round(time.Second), "dir", cache)
	}
	return b, nil
}

// cacheDirs makes the real node's cache folders ($REALNODE_CACHE, or
// netdra-realnode in the user's cache folder) and returns the cache and
// the binaries' places in it.
func cacheDirs(runc string) (string, *Binaries, error) {
	cache := os.Getenv(CacheDirEnv)
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", nil, fmt.Errorf("cache dir for the real node's binaries: %w", err)
		}
		cache = filepath.Join(dir, "netdra-realnode")
	}
	b := &Binaries{Dir: filepath.Join(cache, "bin"), CNIDir: filepath.Join(cache, "cni"), Runc: runc, Images: filepath.Join(cache, "images")}
	for _, d := range []string{b.Dir, b.CNIDir, b.Images} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", nil, err
		}
	}
	return cache, b, nil
}

// buildSteps are the go installs of the real node's programs, from the
// module at src into b's folders.
func buildSteps(src string, b *Binaries) []goInstall {
	return []goInstall{
		// The kubelet is built as the testworld binary is (CGO_ENABLED and
		// GOFLAGS as the environment says: make sets CGO_ENABLED=0 and
		// -trimpath for every build), so that the Kubernetes packages both
		// link are compiled once: a build in another configuration changes
		// the cache key of everything above package runtime and compiles
		// most of Kubernetes a second time. It runs on the host, so a
		// dynamically linked one is fine too.
		{what: "kubelet v1.37.2 (the first build compiles the kubelet's part of Kubernetes: minutes)", dir: src, gobin: b.Dir, cgo: true,
			args: []string{"-ldflags=-s -w " + controlplane.LDFlags, "k8s.io/kubernetes/cmd/kubelet"}},
		{what: "kubectl v1.37.2", dir: src, gobin: b.Dir, cgo: true,
			args: []string{"-ldflags=-s -w " + controlplane.LDFlags, "k8s.io/kubernetes/cmd/kubectl"}},
		{what: "containerd and ctr v2.4.2", dir: filepath.Join(src, "realnode/tools/containerd"), gobin: b.Dir,
			args: []string{"-tags", containerdTags, "-ldflags", containerdLDFlags, "github.com/containerd/containerd/v2/cmd/containerd", "github.com/containerd/containerd/v2/cmd/ctr"}},
		{what: "containerd-shim-runc-v2 v2.4.2", dir: filepath.Join(src, "realnode/tools/containerd"), gobin: b.Dir,
			args: []string{"-tags", containerdTags + " no_grpc", "-ldflags", containerdLDFlags, "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"}},
		{what: "CNI plugins v1.10.0 (loopback, bridge, host-local)", dir: filepath.Join(src, "realnode/tools/cni"), gobin: b.CNIDir,
			args: []string{"-ldflags=-s -w", "github.com/containernetworking/plugins/plugins/main/loopback",
				"github.com/containernetworking/plugins/plugins/main/bridge", "github.com/containernetworking/plugins/plugins/ipam/host-local"}},
		{what: "the pause and test-app images' programs", dir: src, gobin: b.Dir,
			args: []string{"-ldflags=-s -w", "./realnode/images/pause", "./realnode/images/testapp"}},
	}
}

const containerdLDFlags = "-s -w -X github.com/containerd/containerd/v2/version.Version=v2.4.2" +
	" -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"

// goInstall is one `go install` with progress; static (CGO_ENABLED=0)
// unless cgo is set.
type goInstall struct {
	what, dir, gobin string
	cgo              bool
	args             []string
}

func (g goInstall) run(ctx context.Context, logger *slog.Logger) error {
	t0 := time.Now()
	// The environment's GOFLAGS (make's -trimpath and tags) and, for the
	// kubelet, CGO_ENABLED: its packages then share the build cache with
	// the testworld binary's (the same Kubernetes), halving a cold build.
	cmd := exec.CommandContext(ctx, "go", append([]string{"install"}, g.args...)...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "GOBIN="+g.gobin, "GOWORK=off")
	if !g.cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan struct{})
	go func() { // a cold build takes minutes: say it still works
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				logger.Info("   ... still building "+g.what, "elapsed", time.Since(t0).Round(time.Second))
			}
		}
	}()
	err := cmd.Run()
	close(done)
	if err != nil {
		return fmt.Errorf("building %s: go install in %s: %w: %s", g.what, g.dir, err, out.String())
	}
	if d := time.Since(t0); d > 5*time.Second {
		logger.Info("built "+g.what, "took", d.Round(time.Second))
	}
	return nil
}

// writeImage packs one static binary as a single-layer OCI image archive
// (docker-archive tarball, which ctr images import reads) with
// go-containerregistry; rewritten only when the binary changed.
func writeImage(bin, path, ref, out string) error {
	bi, err := os.Stat(bin)
	if err != nil {
		return err
	}
	if oi, err := os.Stat(out); err == nil && oi.ModTime().After(bi.ModTime()) {
		return nil
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	layer, err := tarLayer(strings.TrimPrefix(path, "/"), data)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{path}, Env: []string{"PATH=/"}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
