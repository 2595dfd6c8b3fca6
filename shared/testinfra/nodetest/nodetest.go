// Package nodetest runs netdra's node processes in tests as real processes:
// it builds the binaries once per test binary and starts each on its own
// socket; the provisioner runs inside a throwaway network namespace that
// stands in for the node's host netns, so tests never touch the real one,
// and in a mount namespace of its own that outlives the process, as a
// pod's hostPath with Bidirectional propagation outlives its container:
// its netns pins and bpffs stay across a restart. Everything it makes is removed when the test ends. It needs root.
package nodetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/rpc"
)

var (
	buildOnce sync.Once
	binDir    string
	built     bool // binDir is ours to remove (not $NETDRA_TEST_BINARIES)
	buildErr  error
)

// BuildTags are the build tags of the binaries, as make build and the
// images build them (the Makefile's GO_TAGS, pods/images): grpcnotrace
// leaves grpc's x/net/trace and html/template out of the code each process
// loads.
const BuildTags = "grpcnotrace"

// Binaries builds the node processes (state, provisioner, nri, dra when
// present) and nri's OCI hook binary, netdra-hook (Hook), into a folder
// shared by the test binary and returns it, as the images build them:
// static (CGO_ENABLED=0), with BuildTags, without this machine's paths and
// symbol tables, so that the tests measure (RSS, start times) what ships.
//
// $NETDRA_TEST_BINARIES, when set, names a folder of binaries built
// that way beforehand (another commit's, to measure it beside this one's):
// they are used instead, and nothing is built.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if dir := os.Getenv("NETDRA_TEST_BINARIES"); dir != "" {
			binDir = dir
			return
		}
		// The product module's folder, from it or from a module that
		// replaces it with a local path (the test world).
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/netdra/netdra").Output()
		if err != nil {
			buildErr = fmt.Errorf("finding the netdra module: %w", err)
			return
		}
		root := strings.TrimSpace(string(out))
		binDir, buildErr = os.MkdirTemp("", "netdra-bin")
		if buildErr != nil {
			return
		}
		built = true
		var pkgs []string
		for _, s := range []string{"state", "provisioner", "nri", "dra"} {
			if _, err := os.Stat(filepath.Join(root, "services", s, "main.go")); err == nil {
				pkgs = append(pkgs, "./services/"+s)
			}
		}
		if _, err := os.Stat(filepath.Join(root, hookPkg, "main.go")); err == nil {
			pkgs = append(pkgs, "./"+hookPkg)
		}
		cmd := exec.Command("go", append([]string{"build", "-tags", BuildTags, "-trimpath", "-ldflags=-s -w", "-o", binDir + "/"}, pkgs...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// Main runs m's tests, removes the folder Binaries built (shared by every
// test of the binary, so no test's cleanup may remove it) and exits with
// m.Run's code: a package whose tests call Binaries or Hook calls it from
// its TestMain, or the folder is left in the temporary directory.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBinaries()
	os.Exit(code)
}

// RemoveBinaries removes the folder Binaries built, if it built one; a
// folder named by $NETDRA_TEST_BINARIES is left alone. For a TestMain that
// cannot call Main.
func RemoveBinaries() {
	if built {
		_ = os.RemoveAll(binDir)
	}
}

// hookPkg is netdra-hook's main package, in the product module.
const hookPkg = "services/nri/cmd/netdra-hook"

// Hook builds the binaries (Binaries) and returns the path of the OCI hook
// binary netdra-hook, which the DaemonSet installs on the host for dra's
// -netns-hook and nri's -gate-hook.
func Hook(t testing.TB) string {
	t.Helper()
	return filepath.Join(Binaries(t), "netdra-hook")
}

// Dir returns a short folder for sockets (unix socket paths are limited to
// 108 bytes), removed at the end of the test.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// IP runs the ip command and fails the test when it fails.
func IP(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Netns adds a named netns (/var/run/netns/<name>), deleted at the end of
// the test, and returns its name.
func Netns(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	IP(t, "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// Proc is one running node process.
type Proc struct {
	t      testing.TB
	Name   string
	Socket string
	args   []string
	binArg int // the binary's index in args
	cmd    *exec.Cmd
	logs   *lockedWriter
	exited chan struct{}
}

// Log returns what the process wrote to stderr.
func (p *Proc) Log() string { return p.logs.String() }

// Start runs a node process (a binary from Binaries) with args, in the
// netns hostNS when it is not empty (and in a mount namespace of its own,
// kept across restarts: MountNS), with its socket in dir, and waits until
// it serves. It serves no metrics unless args give a -metrics-address
// (the binaries' default ports would collide between tests running at
// once). The process is killed at the end of the test; its log is printed
// when the test failed.
func Start(t testing.TB, name, dir, hostNS string, args ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, Name: name, Socket: filepath.Join(dir, name+".sock")}
	bin := filepath.Join(Binaries(t), name)
	p.args = append([]string{bin, "-socket", p.Socket, "-log-level", "debug", "-metrics-address="}, args...)
	if hostNS != "" {
		mnt := MountNS(t, dir, name, hostNS)
		p.args = append([]string{"nsenter", "--mount=" + mnt, "--net=/var/run/netns/" + hostNS, "--"}, p.args...)
		p.binArg = 4
	}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Log())
			return
		}
		if line, ok := oneFormat(p.Log(), p.logs.cutLines()); !ok {
			t.Errorf("%s wrote a log line that is not JSON (every library's lines go through the process's logger): %q", name, line)
		}
	})
	return p
}

// oneFormat reports whether every line of log is a JSON object, the node
// processes' default log format, and otherwise the first line that is not.
// A line that starts at an offset in cut is one a SIGKILL cut short (Kill)
// and is not judged.
func oneFormat(log string, cut map[int]bool) (string, bool) {
	off := 0
	for line := range strings.Lines(log) {
		start := off
		off += len(line)
		if cut[start] {
			continue
		}
		if line = strings.TrimSpace(line); line != "" && !(strings.HasPrefix(line, "{") && json.Valid([]byte(line))) {
			return line, false
		}
	}
	return "", true
}

// MountNS makes a mount namespace for a process of the netns hostNS, as
// `ip netns exec` does (a slave copy of the host's, with a sysfs of hostNS
// on /sys) but kept in a file under dir (returned) until the end of the
// test, so that what the process mounts (its netns pins, its bpffs)
// outlives it, as on a node the host's mounts outlive a container.
func MountNS(t testing.TB, dir, name, hostNS string) string {
	t.Helper()
	holder := filepath.Join(dir, name+".mnt")
	if err := os.MkdirAll(holder, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(holder, "ns")
	steps := [][]string{
		// A namespace file can be bound only on a private mount.
		{"mount", "--bind", holder, holder},
		{"mount", "--make-private", holder},
		{"touch", file},
		{"unshare", "--mount=" + file, "--propagation", "slave", "true"},
		{"nsenter", "--mount=" + file, "--net=/var/run/netns/" + hostNS, "--", "sh", "-c", "umount -l /sys && mount -t sysfs sysfs /sys"},
	}
	t.Cleanup(func() {
		_ = exec.Command("umount", file).Run()
		_ = exec.Command("umount", "-l", holder).Run()
	})
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return file
}

func (p *Proc) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	if p.logs == nil {
		p.logs = &lockedWriter{}
	}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(p.cmd, p.exited)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rpc.CheckHealth(ctx, p.Socket, "")
		cancel()
		if err == nil {
			return
		}
		select {
		case <-p.exited:
			p.t.Fatalf("%s exited before serving:\n%s", p.Name, p.Log())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not serving: %v\n%s", p.Name, err, p.Log())
		}
	}
}

// Pid is the process's id, of its current run (a Restart changes it).
// The provisioner's nsenter runs it in place: its id is the
// provisioner's.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
	// A process killed in the middle of a write (a long line into a full
	// pipe) leaves half a line: end it, so that the next start's lines
	// begin on their own, and mark it as cut.
	p.logs.endCutLine()
}

// Restart starts the process again with the same arguments.
func (p *Proc) Restart() {
	p.t.Helper()
	p.Kill()
	p.start()
}

// RestartBinary starts the process again with the same arguments from the
// binary bin instead of the one it ran (Binaries' for its name), for a
// benchmark that compares two builds of a process in one world. Later
// Restarts run bin too.
func (p *Proc) RestartBinary(bin string) {
	p.t.Helper()
	p.Kill()
	p.args[p.binArg] = bin
	p.start()
}

type lockedWriter struct {
	mu  sync.Mutex
	b   strings.Builder
	cut map[int]bool // offsets of the lines a kill cut short
}

// endCutLine ends the log's last line when it has no newline, and records
// it as cut.
func (w *lockedWriter) endCutLine() {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.b.String()
	if s == "" || strings.HasSuffix(s, "\n") {
		return
	}
	if w.cut == nil {
		w.cut = map[int]bool{}
	}
	w.cut[strings.LastIndexByte(s, '\n')+1] = true
	w.b.WriteByte('\n')
}

// cutLines returns the offsets of the lines a kill cut short.
func (w *lockedWriter) cutLines() map[int]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.cut)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
