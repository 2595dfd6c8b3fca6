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
				registry: "/tmp/w/plugins_registry", plugins: "/tmp/w/plugins", netnsPrefix: "testworld-"},
		},
		{
			name: "everything set",
			args: []string{"-dir", "/d", "-node-name", "n1", "-nri-socket", "/run/nri/nri.sock",
				"-plugins-registry", "/var/lib/kubelet/plugins_registry", "-plugins", "/var/lib/kubelet/plugins",
				"-netns-prefix", "x-", "-log-level", "debug", "-v", "2", "-keep"},
			want: worldConfig{dir: "/d", nodeName: "n1", nriSocket: "/run/nri/nri.sock",
				registry: "/var/lib/kubelet/plugins_registry", plugins: "/var/lib/kubelet/plugins", netnsPrefix: "x-",
				logLevel: -4, verbosity: 2, keep: true},
		},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
		{name: "bad level", args: []string{"-log-level", "loud"}, wantErr: true},
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
// writes world.env, prints the hints, and on Ctrl-C (SIGINT) stops cleanly
// and removes its directory.
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
	dir := filepath.Join(worldtest.TempDir(t), "world")
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
		t.Errorf("world.env: %v %q", err, env)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("testworld exit: %v\nstderr:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s not removed at exit: %v", dir, err)
	}
}
