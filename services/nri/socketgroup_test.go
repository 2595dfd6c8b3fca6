package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

func TestMain(m *testing.M) { nodetest.Main(m) }

// The DaemonSet's ids: the pod's fsGroup, which owns the sockets' folder
// and is the state service's uid and gid; wrongGroup is a group none of
// netdra's processes is in.
const (
	fsGroup    = 65532
	wrongGroup = 65533
	otherUID   = 1000
)

// start starts cmd with its stderr in the returned buffer, killed at the
// end of the test.
func start(t *testing.T, cmd *exec.Cmd) *testenv.Buffer {
	t.Helper()
	logs := &testenv.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), logs)
		}
	})
	return logs
}

// capless runs bin with args as uid uid, gid gid and the supplementary
// groups groups, with no capability (setpriv drops them all, the bounding
// set too): as the DaemonSet runs dra and nri (uid 0, capabilities
// dropped), so the socket's and the folder's modes and groups apply to it.
func capless(uid, gid int, groups []int, bin string, args ...string) *exec.Cmd {
	var gs []string
	for _, g := range groups {
		gs = append(gs, strconv.Itoa(g))
	}
	return exec.Command("setpriv", append([]string{"--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(gid),
		"--groups", strings.Join(gs, ","), "--inh-caps", "-all", "--bounding-set", "-all", "--", bin}, args...)...)
}

// copyBinary copies the binary name from Binaries' folder (root's only)
// into dir, executable by all, and returns its path.
func copyBinary(t *testing.T, dir, name string) string {
	t.Helper()
	src, err := os.Open(filepath.Join(nodetest.Binaries(t), name))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, name)
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSocketGroup: the node's sockets admit by their folder's and file's
// group and mode, with real processes run as the DaemonSet runs them. The
// state service, as uid and gid 65532 (syscall.Credential), listens in a
// folder of group 65532, mode 2770: its socket is 0660, group 65532. A
// client with no capabilities in that group (`state health`, uid 0) is
// served; one outside it, in another group, is refused at connect
// (permission denied); one in the group but of a uid the service does not
// admit connects and is refused by the uid allow-list (SO_PEERCRED).
// The wrong group seen from a node process: an nri
// outside the folder's group logs that it cannot reach the state service,
// and why, and its Status says it waits for it, within seconds; an nri in
// the group does not. A folder of another group gives the socket its group
// (setgid): a client in the pod's fsGroup is refused at connect.
func TestSocketGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs processes as other uids and groups")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	root, err := os.MkdirTemp("", "sg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	mkdir := func(name string, uid, gid int, mode os.FileMode) string {
		t.Helper()
		dir := filepath.Join(root, name)
		if name == "" {
			dir = root
		} else if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	mkdir("", 0, 0, 0o755)
	bin := mkdir("bin", 0, 0, 0o755)
	sockets := mkdir("sockets", 0, fsGroup, 0o770|os.ModeSetgid)
	db := mkdir("db", fsGroup, fsGroup, 0o700)
	stateBin, nriBin := copyBinary(t, bin, "state"), copyBinary(t, bin, "nri")

	stateSock := filepath.Join(sockets, "state.sock")
	state := exec.Command(stateBin, "-socket", stateSock, "-db", filepath.Join(db, "state.db"), "-metrics-address=", "-log-level", "debug")
	state.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: fsGroup, Gid: fsGroup, Groups: []uint32{fsGroup}}}
	start(t, state)
	waitServing(t, stateSock)
	fi, err := os.Lstat(stateSock)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != fsGroup || st.Gid != fsGroup || fi.Mode().Perm() != 0o660 {
		t.Fatalf("state's socket: uid %d gid %d mode %#o, want %d %d 0660", st.Uid, st.Gid, fi.Mode().Perm(), fsGroup, fsGroup)
	}

	for _, c := range []struct {
		name     string
		uid, gid int
		groups   []int
		want     string // "" when served, else what the refusal says
	}{
		{"uid 0 in the group", 0, 0, []int{fsGroup}, ""},
		{"uid 0 in another group", 0, 0, []int{wrongGroup}, "connect: permission denied"},
		{"another uid in the group", otherUID, fsGroup, []int{fsGroup}, "PermissionDenied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := capless(c.uid, c.gid, c.groups, stateBin, "health", "-socket", stateSock).CombinedOutput()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v\n%s", err, out)
			case c.want != "" && err == nil:
				t.Fatalf("served, want refused with %q", c.want)
			case c.want != "" && !strings.Contains(string(out), c.want):
				t.Fatalf("refused with %q, want %q", out, c.want)
			}
			t.Logf("state health: %v %s", err, bytes.TrimSpace(out))
		})
	}

	// Two nri processes, each with its admin socket in a folder of its
	// own, its provisioner and runtime absent.
	nri := func(name string, groups []int) (sock string, logs *testenv.Buffer) {
		dir := mkdir(name, 0, 0, 0o755)
		sock = filepath.Join(dir, "nri.sock")
		logs = start(t, capless(0, 0, groups, nriBin, "-socket", sock, "-state-socket", stateSock,
			"-provisioner-socket", filepath.Join(dir, "provisioner.sock"), "-nri-socket", filepath.Join(dir, "nri-runtime.sock"),
			"-gate-socket=", "-metrics-address=", "-log-level", "debug"))
		return sock, logs
	}
	began := time.Now()
	inSock, _ := nri("nri-in", []int{fsGroup})
	outSock, outLogs := nri("nri-out", []int{wrongGroup})
	waitServing(t, inSock)
	waitServing(t, outSock)
	stateLine := "state service (" + stateSock + ")"
	var said time.Duration
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		w := waitingFor(t, outSock)
		line := ""
		for _, l := range w {
			if strings.HasPrefix(l, stateLine) {
				line = l
			}
		}
		if strings.Contains(line, "permission denied") {
			said = time.Since(began)
			t.Logf("nri outside the group, after %v: waitingFor %q", said.Round(10*time.Millisecond), line)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nri outside the group: waitingFor %q, want a line for %s with permission denied", w, stateLine)
		}
	}
	if l := outLogs.String(); !strings.Contains(l, "Cannot reach a peer") || !strings.Contains(l, stateSock) || !strings.Contains(l, "permission denied") {
		t.Errorf("nri outside the group logged no warning naming the state socket and permission denied:\n%s", l)
	}
	// By now the in-group nri has been up longer than the peer watch's
	// grace: it would name the state service if it could not reach it.
	if w := waitingFor(t, inSock); strings.Contains(strings.Join(w, "\n"), stateLine) {
		t.Errorf("nri in the group waits for the state service: %q", w)
	} else {
		t.Logf("nri in the group: waitingFor %q", w)
	}

	// The folder of a wrong group: its setgid bit gives
	// the socket the folder's group, so a client in the pod's fsGroup,
	// which passes the folder as its owner, is refused at the socket.
	wrong := mkdir("sockets-wrong", 0, wrongGroup, 0o770|os.ModeSetgid)
	wrongSock := filepath.Join(wrong, "state.sock")
	state2 := exec.Command(stateBin, "-socket", wrongSock, "-db", filepath.Join(db, "state2.db"), "-metrics-address=", "-log-level", "debug")
	state2.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: fsGroup, Gid: fsGroup, Groups: []uint32{fsGroup, wrongGroup}}}
	start(t, state2)
	waitServing(t, wrongSock)
	if fi, err := os.Lstat(wrongSock); err != nil || fi.Sys().(*syscall.Stat_t).Gid != wrongGroup {
		t.Fatalf("the socket in a folder of group %d: %v, %v", wrongGroup, fi, err)
	}
	out, err := capless(0, 0, []int{fsGroup}, stateBin, "health", "-socket", wrongSock).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "connect: permission denied") {
		t.Errorf("state health through a folder of another group: %v %s, want permission denied", err, out)
	}
	t.Logf("state health through a folder of another group: %v %s", err, bytes.TrimSpace(out))
}

func waitServing(t *testing.T, sock string) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = rpc.CheckHealth(ctx, sock, "")
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("%s not serving: %v", sock, err)
}

// waitingFor is the waitingFor of the Status nri serves on sock, asked as
// root.
func waitingFor(t *testing.T, sock string) []string {
	t.Helper()
	cc, err := rpc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := nriv1.NewNriServiceClient(cc).Status(ctx, &nriv1.StatusRequest{})
	if err != nil {
		t.Fatal(fmt.Errorf("Status of %s: %w", sock, err))
	}
	return st.GetWaitingFor()
}
