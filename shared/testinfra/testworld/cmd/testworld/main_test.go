package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

func TestParseWorldFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    worldConfig
		wantErr bool
	}{
		{
			name: "defaults",
			args: []string{"-dir", "/tmp/w"},
			want: worldConfig{dir: "/tmp/w", nodeName: "testworld-node", startTimeout: 3 * time.Minute},
		},
		{
			name: "everything set",
			args: []string{"-dir", "/d", "-node-name", "n1", "-log-level", "debug", "-v", "2", "-keep", "-start-timeout", "30s"},
			want: worldConfig{dir: "/d", nodeName: "n1", logLevel: -4, verbosity: 2, keep: true, startTimeout: 30 * time.Second},
		},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
		{name: "emulated node's flag", args: []string{"-nri-socket", "/run/nri.sock"}, wantErr: true},
		{name: "dir too long for the node's sockets", args: []string{"-dir", "/" + strings.Repeat("d", 55)}, wantErr: true},
		{name: "bad level", args: []string{"-log-level", "loud"}, wantErr: true},
		{name: "zero start timeout", args: []string{"-start-timeout", "0s"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWorldFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(worldConfig{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuildNodeRefusesArguments: build-node takes no arguments (and builds
// nothing when given some).
func TestBuildNodeRefusesArguments(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"build-node", "extra"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "unexpected arguments") {
		t.Errorf("build-node extra: exit %d, stderr %q; want 2 and a word about the arguments", code, stderr.String())
	}
}

// TestCommand runs the testworld command as a person would: it comes up
// with a real node Ready, the default ServiceAccount in "default" already
// there (pods need it), writes world.env, prints the hints, and on Ctrl-C
// (SIGINT) stops cleanly and removes what it made: the whole directory
// when it made it, only its own files when the directory was there before.
func TestCommand(t *testing.T) {
	testenv.RequireRoot(t, "the real node runs containerd and the kubelet")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := controlplane.Binary(ctx, worldtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	worldtest.Binaries(t) // the node's programs: the command finds them built
	t.Run("build-node", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, bin, "build-node").CombinedOutput()
		if err != nil || !strings.Contains(string(out), ">> real node ready in ") {
			t.Errorf("testworld build-node: %v\n%s", err, out)
		}
	})
	t.Run("fresh dir", func(t *testing.T) {
		dir := filepath.Join(worldtest.TempDir(t), "world")
		runCommand(ctx, t, bin, dir)
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s not removed at exit: %v", dir, err)
		}
	})
	t.Run("existing dir", func(t *testing.T) {
		dir := worldtest.TempDir(t)
		mine := filepath.Join(dir, "mine.txt")
		if err := os.WriteFile(mine, []byte("not the world's"), 0o644); err != nil {
			t.Fatal(err)
		}
		runCommand(ctx, t, bin, dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("%s removed at exit: %v", dir, err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if diff := cmp.Diff([]string{"mine.txt"}, names); diff != "" {
			t.Errorf("left in the existing dir (-want +got):\n%s", diff)
		}
	})
}

// runCommand starts the testworld binary on dir, checks it is ready with
// a Ready real node and stops it with SIGINT.
func runCommand(ctx context.Context, t *testing.T, bin, dir string) {
	t.Helper()
	nodeName := worldtest.NodeName(t)
	cmd := exec.CommandContext(ctx, bin, "-dir", dir, "-node-name", nodeName)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "Running until Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	nodeDir := filepath.Join(dir, "node")
	for _, want := range []string{"kubeconfig", "NRI socket", "plugins registry", "curl --cacert",
		"kubelet log         " + nodeDir + "/logs/kubelet.log", "--address " + nodeDir + "/containerd.sock -n k8s.io containers ls"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("hints lack %q:\n%s\nstderr:\n%s", want, out.String(), stderr.String())
		}
	}
	env := readEnv(t, filepath.Join(dir, "world.env"))
	wantEnv := map[string]string{
		"KUBECONFIG":                  env["KUBECONFIG"],
		"TESTWORLD_NODE":              nodeName,
		"TESTWORLD_NRI_SOCKET":        nodeDir + "/nri/nri.sock",
		"TESTWORLD_PLUGINS_REGISTRY":  nodeDir + "/kubelet/plugins_registry",
		"TESTWORLD_PLUGINS":           nodeDir + "/kubelet/plugins",
		"TESTWORLD_NODE_DIR":          nodeDir,
		"TESTWORLD_CONTAINERD_SOCKET": nodeDir + "/containerd.sock",
	}
	if diff := cmp.Diff(wantEnv, env); diff != "" || env["KUBECONFIG"] == "" {
		t.Errorf("world.env (-want +got):\n%s", diff)
	}
	for _, sock := range []string{env["TESTWORLD_NRI_SOCKET"], env["TESTWORLD_CONTAINERD_SOCKET"]} {
		if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s is no socket: %v", sock, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env["KUBECONFIG"])
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Ready means pods are admitted: no wait here.
	if _, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("ready without the default ServiceAccount: %v", err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, env["TESTWORLD_NODE"], metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node: %v", err)
	}
	if !nodeReady(node) || !strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("node %s: Ready %v, runtime %q; want a Ready node of a real kubelet on containerd",
			node.Name, nodeReady(node), node.Status.NodeInfo.ContainerRuntimeVersion)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("testworld exit: %v\nstderr:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(nodeDir); !os.IsNotExist(err) {
		t.Errorf("the node's directory %s is left: %v", nodeDir, err)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), " "+dir+"/") {
		t.Errorf("mounts under %s are left", dir)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readEnv reads world.env's KEY=value lines.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("world.env: %v", err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Errorf("world.env: line %q is no KEY=value", l)
		}
		env[k] = v
	}
	return env
}

// TestMakefileLDFlags: the Makefile builds _output/testworld with the
// same version ldflags as controlplane.Binary.
func TestMakefileLDFlags(t *testing.T) {
	mk, err := os.ReadFile("../../../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	want := "TESTWORLD_LDFLAGS := " + controlplane.LDFlags + "\n"
	if !strings.Contains(string(mk), want) {
		t.Errorf("the Makefile lacks the line %q", want)
	}
}
