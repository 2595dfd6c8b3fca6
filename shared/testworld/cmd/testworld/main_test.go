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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/netdra/netdra/shared/testworld/controlplane"
	"github.com/netdra/netdra/shared/testworld/worldtest"
)

func TestParseWorldFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    worldConfig
		wantErr bool
	}{
		{
			name: "defaults under dir",
			args: []string{"-dir", "/tmp/w"},
			want: worldConfig{dir: "/tmp/w", nodeName: "testworld-node", nriSocket: "/tmp/w/nri.sock",
				registry: "/tmp/w/plugins_registry", plugins: "/tmp/w/plugins", netnsPrefix: "testworld-",
				startTimeout: 3 * time.Minute},
		},
		{
			name: "everything set",
			args: []string{"-dir", "/d", "-node-name", "n1", "-nri-socket", "/run/nri/nri.sock",
				"-plugins-registry", "/var/lib/kubelet/plugins_registry", "-plugins", "/var/lib/kubelet/plugins",
				"-netns-prefix", "x-", "-log-level", "debug", "-v", "2", "-keep", "-start-timeout", "30s"},
			want: worldConfig{dir: "/d", nodeName: "n1", nriSocket: "/run/nri/nri.sock",
				registry: "/var/lib/kubelet/plugins_registry", plugins: "/var/lib/kubelet/plugins", netnsPrefix: "x-",
				logLevel: -4, verbosity: 2, keep: true, startTimeout: 30 * time.Second},
		},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
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

// TestCommand runs the testworld command as a person would: it comes up,
// with the default ServiceAccount in "default" already there (pods need
// it), writes world.env, prints the hints, and on Ctrl-C (SIGINT) stops
// cleanly and removes what it made: the whole directory when it made it,
// only its own files when the directory was there before.
func TestCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the node creates network namespaces: run as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := controlplane.Binary(ctx, worldtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
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

// runCommand starts the testworld binary on dir, checks it is ready and
// stops it with SIGINT.
func runCommand(ctx context.Context, t *testing.T, bin, dir string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "-dir", dir, "-node-name", worldtest.NodeName(t))
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
	for _, want := range []string{"kubeconfig", "NRI socket", "plugins registry", "curl --cacert"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("hints lack %q:\n%s\nstderr:\n%s", want, out.String(), stderr.String())
		}
	}
	env, err := os.ReadFile(filepath.Join(dir, "world.env"))
	if err != nil || !strings.Contains(string(env), "KUBECONFIG=") {
		t.Fatalf("world.env: %v %q\nstderr:\n%s", err, env, stderr.String())
	}
	kubeconfig := strings.TrimPrefix(strings.SplitN(string(env), "\n", 2)[0], "KUBECONFIG=")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("testworld exit: %v\nstderr:\n%s", err, stderr.String())
	}
}

// TestMakefileLDFlags: the Makefile builds _output/testworld with the
// same version ldflags as controlplane.Binary.
func TestMakefileLDFlags(t *testing.T) {
	mk, err := os.ReadFile("../../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	want := "TESTWORLD_LDFLAGS := " + controlplane.LDFlags + "\n"
	if !strings.Contains(string(mk), want) {
		t.Errorf("the Makefile lacks the line %q", want)
	}
}
