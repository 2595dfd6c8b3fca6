package realnode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
)

// Runtime names a container runtime a real node runs.
type Runtime string

// The real node's runtimes: containerd v2.4.2 (the default) and CRI-O
// v1.34.0.
const (
	Containerd Runtime = "containerd"
	CRIO       Runtime = "crio"
)

// crioTags are CRI-O's build tags for a static binary without the C
// libraries (gpgme, btrfs, devicemapper, ostree, libseccomp) Debian's
// packages would have to provide: images are verified by the Go OpenPGP
// implementation, and the containers run without a seccomp profile.
// CRI-O is built with -trimpath whatever GOFLAGS say: no other build
// shares its packages, and one flag set keeps one copy of them in the
// build cache.
const crioTags = "containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"

const crioLDFlags = "-s -w"

// Crio, Pinns, RuncClamp and LoadImage are the paths of CRI-O's programs,
// set by BuildCRIO.
func (b *Binaries) Pinns() string     { return filepath.Join(b.Dir, "pinns") }
func (b *Binaries) RuncClamp() string { return filepath.Join(b.Dir, "runcclamp") }
func (b *Binaries) LoadImage() string { return filepath.Join(b.Dir, "loadimage") }

// BuildCRIO builds (or finds up to date) what a CRI-O node needs beyond
// Build's programs, into the same cache, and sets b.Crio and b.Conmon:
// crio v1.34.0 and its loadimage from the module under tools/crio
// (static, crioTags), pinns (CRI-O's namespace pinner, C without any
// library) with the host's C compiler from the same module's sources, and
// runcclamp. conmon comes from Debian (apt-get install conmon; make
// node-deps installs it). A cold build takes minutes; a warm one seconds.
// Concurrent callers are serialized by a file lock apart from Build's.
func BuildCRIO(ctx context.Context, logger *slog.Logger, b *Binaries) error {
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		return fmt.Errorf("conmon not found: install Debian's (apt-get install conmon; make node-deps does): %w", err)
	}
	src, err := controlplane.ModuleDir()
	if err != nil {
		return err
	}
	// A lock of its own: what it builds are other files than Build's, and
	// a cold build of CRI-O must not hold back every node's start, which
	// takes Build's lock.
	unlock, err := controlplane.LockFile(filepath.Join(filepath.Dir(b.Dir), ".lock-crio"))
	if err != nil {
		return err
	}
	defer unlock()
	tools := filepath.Join(src, "realnode/tools/crio")
	t0 := time.Now()
	steps := []goInstall{
		{what: "CRI-O v1.34.0 (the first build compiles containers/storage and containers/image: minutes)", dir: tools, gobin: b.Dir,
			args: []string{"-trimpath", "-tags", crioTags, "-ldflags", crioLDFlags, "github.com/cri-o/cri-o/cmd/crio", "./loadimage"}},
		{what: "runcclamp", dir: src, gobin: b.Dir, args: []string{"-ldflags=-s -w", "./realnode/runcclamp"}},
	}
	for _, s := range steps {
		if err := s.run(ctx, logger); err != nil {
			return err
		}
	}
	if err := buildPinns(ctx, tools, b.Pinns()); err != nil {
		return err
	}
	if d := time.Since(t0); d > 10*time.Second {
		logger.Info("CRI-O's binaries ready", "took", d.Round(time.Second))
	}
	b.Crio, b.Conmon = filepath.Join(b.Dir, "crio"), conmon
	return nil
}

// buildPinns compiles CRI-O's pinns from the sources of the cri-o module
// that the module in tools requires (go list finds them in the module
// cache), statically as CRI-O's own Makefile does; skipped when out is
// newer than every source.
func buildPinns(ctx context.Context, tools, out string) error {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cri-o/cri-o")
	cmd.Dir = tools
	cmd.Env = append(os.Environ(), "GOWORK=off")
	dir, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("finding CRI-O's sources for pinns: %w", err)
	}
	srcs, _ := filepath.Glob(filepath.Join(string(dir[:len(dir)-1]), "pinns/src/*.c"))
	if len(srcs) == 0 {
		return fmt.Errorf("no pinns sources under %s", dir)
	}
	if oi, err := os.Stat(out); err == nil {
		fresh := true
		for _, s := range srcs {
			if si, err := os.Stat(s); err != nil || si.ModTime().After(oi.ModTime()) {
				fresh = false
			}
		}
		if fresh {
			return nil
		}
	}
	args := append([]string{"-std=c99", "-Os", "-Wall", "-Wextra", "-static", "-s", "-o", out + ".tmp"}, srcs...)
	if o, err := exec.CommandContext(ctx, "cc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("building pinns (cc %v): %w: %s", args, err, o)
	}
	return os.Rename(out+".tmp", out)
}

// loadImages puts the pause and test-app images into CRI-O's store.
func (n *Node) loadImages(ctx context.Context) error {
	b := n.cfg.Binaries
	out, err := exec.CommandContext(ctx, b.LoadImage(), "-root", filepath.Join(n.cfg.Dir, "crio/root"),
		"-runroot", filepath.Join(n.cfg.Dir, "crio/run"), "-driver", "overlay",
		PauseImage+"="+filepath.Join(b.Images, "pause.tar"),
		TestAppImage+"="+filepath.Join(b.Images, "testapp.tar")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("loading the images into CRI-O's store: %w: %s", err, out)
	}
	return nil
}

func (n *Node) startCRIO(ctx context.Context) error {
	// crio runs its runtime itself (state, kill, delete) as well as
	// through conmon: runcclamp finds runc by the same variable.
	p, err := startProcEnv(n.LogPath("crio"), []string{"REALNODE_RUNC=" + n.cfg.Binaries.Runc},
		n.cfg.Binaries.Crio, "--config", filepath.Join(n.cfg.Dir, "crio/crio.conf"),
		"--config-dir", filepath.Join(n.cfg.Dir, "crio/crio.conf.d"))
	if err != nil {
		return fmt.Errorf("starting crio: %w", err)
	}
	return n.awaitRuntime(ctx, "crio", p, func(ctx context.Context) bool {
		return withCRI(ctx, n.CRISocket(), func(c runtimeapi.RuntimeServiceClient) error {
			_, err := c.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		}) == nil
	})
}

// removeSandboxes stops and removes every pod sandbox CRI-O has (their
// containers with them), so that no conmon or container outlives the
// node.
func (n *Node) removeSandboxes(ctx context.Context) {
	_ = withCRI(ctx, n.CRISocket(), func(c runtimeapi.RuntimeServiceClient) error {
		resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, sb := range resp.Items {
			if _, err := c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil && status.Code(err) != codes.NotFound {
				n.log.Warn("stopping a sandbox left", "id", sb.Id, "err", err)
			}
			if _, err := c.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil && status.Code(err) != codes.NotFound {
				n.log.Warn("removing a sandbox left", "id", sb.Id, "err", err)
			}
		}
		return nil
	})
}

// installDoc is the install guide, relative to the repository's root,
// whose CRI-O drop-in the node writes.
const installDoc = "docs/install.md"

// nriDropInLine is the guide's command that writes CRI-O's NRI drop-in:
// printf with a single-quoted format, redirected to a file in
// /etc/crio/crio.conf.d.
var nriDropInLine = regexp.MustCompile(`(?m)^printf '([^']*)' >/etc/crio/crio\.conf\.d/([A-Za-z0-9._-]+\.conf)$`)

// crioNRIDropIn returns the NRI drop-in that the install guide (doc, its
// text) tells an operator to write: the file's name in
// /etc/crio/crio.conf.d and what the guide's printf writes there (run by
// the host's printf, the format as written, without a shell). An error
// says the guide has no such command, or more than one.
func crioNRIDropIn(doc string) (name string, content []byte, err error) {
	m := nriDropInLine.FindAllStringSubmatch(doc, -1)
	if len(m) != 1 {
		return "", nil, fmt.Errorf("%s: want one line `printf '...' >/etc/crio/crio.conf.d/NAME.conf` (CRI-O's NRI drop-in), found %d", installDoc, len(m))
	}
	out, err := exec.Command("printf", m[0][1]).Output()
	if err != nil {
		return "", nil, fmt.Errorf("%s: running the drop-in's printf %q: %w", installDoc, m[0][1], err)
	}
	return m[0][2], out, nil
}

// writeNRIDropIn writes the install guide's NRI drop-in (crioNRIDropIn)
// into dir, the node's crio.conf.d, under the guide's file name. The
// guide is read from the repository holding the test world's module.
func writeNRIDropIn(dir string) error {
	src, err := controlplane.ModuleDir()
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(filepath.Join(src, "../../..", installDoc))
	if err != nil {
		return fmt.Errorf("reading CRI-O's NRI drop-in from the install guide: %w", err)
	}
	name, content, err := crioNRIDropIn(string(doc))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), content, 0o644)
}
