package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
)

// required are the flags without defaults.
var required = []string{"-bin", "/b", "-testworld", "/tw", "-grpcurl", "/g", "-crds", "/c"}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr string
	}{
		{
			name: "defaults",
			args: required,
			want: config{dir: "/tmp/netdra-dev", binDir: "/b", testworld: "/tw", grpcurl: "/g", crds: "/c",
				nodeName: "netdra-dev", linkPrefix: "ndemo", devices: 2,
				draMetrics: "127.0.0.1:9651", nriMetrics: "127.0.0.1:9652", timeout: 3 * time.Minute},
		},
		{
			name: "everything set",
			args: append([]string{"-dir", "/d", "-node-name", "n1", "-link-prefix", "x1",
				"-devices", "3", "-host-netns", "h", "-dra-metrics", "", "-nri-metrics", "", "-oneshot", "-timeout", "1m"}, required...),
			want: config{dir: "/d", binDir: "/b", testworld: "/tw", grpcurl: "/g", crds: "/c",
				nodeName: "n1", linkPrefix: "x1", devices: 3, hostNetns: "h",
				oneshot: true, timeout: time.Minute},
		},
		{name: "missing -bin", args: []string{"-testworld", "/tw", "-grpcurl", "/g", "-crds", "/c"}, wantErr: "-bin is required"},
		{name: "stray argument", args: append(required, "extra"), wantErr: "unexpected arguments"},
		{name: "no devices", args: append([]string{"-devices", "0"}, required...), wantErr: "-devices 0"},
		{name: "link prefix too long", args: append([]string{"-link-prefix", "abcdefghijklmn"}, required...), wantErr: "-link-prefix"},
		{name: "link prefix with a slash", args: append([]string{"-link-prefix", "a/b"}, required...), wantErr: "-link-prefix"},
		{name: "emulated node's flag", args: append([]string{"-netns-prefix", "p-"}, required...), wantErr: "not defined: -netns-prefix"},
		{name: "bad host netns", args: append([]string{"-host-netns", "a/b"}, required...), wantErr: "-host-netns"},
		{name: "bad node name", args: append([]string{"-node-name", "Node_1"}, required...), wantErr: "-node-name"},
		{name: "dir too long for sockets", args: append([]string{"-dir", "/" + strings.Repeat("d", 90)}, required...), wantErr: "too long for unix socket paths"},
		{name: "dir too long for the node", args: append([]string{"-dir", "/" + strings.Repeat("d", 49)}, required...), wantErr: "real node's folder"},
		{name: "longest dir", args: append([]string{"-dir", "/" + strings.Repeat("d", 48), "-oneshot"}, required...),
			want: config{dir: "/" + strings.Repeat("d", 48), binDir: "/b", testworld: "/tw", grpcurl: "/g", crds: "/c",
				nodeName: "netdra-dev", linkPrefix: "ndemo", devices: 2,
				draMetrics: "127.0.0.1:9651", nriMetrics: "127.0.0.1:9652", oneshot: true, timeout: 3 * time.Minute}},
		{name: "zero timeout", args: append([]string{"-timeout", "0s"}, required...), wantErr: "-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(config{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLinks(t *testing.T) {
	c := config{linkPrefix: "ndemo", devices: 2}
	want := [][2]string{{"ndemo0", "ndemo0p"}, {"ndemo1", "ndemo1p"}}
	if diff := cmp.Diff(want, c.links()); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}

// TestObjectsAreValid: what the demo applies passes netdra's own checks,
// the NodeConfig's and the claim parameters'.
func TestObjectsAreValid(t *testing.T) {
	c := config{nodeName: "netdra-dev", linkPrefix: "ndemo", devices: 2}
	nc := c.nodeConfig()
	if err := v1alpha1.Validate(&nc.Spec); err != nil {
		t.Errorf("the NodeConfig is invalid: %v", err)
	}
	if diff := cmp.Diff([]string{"ndemo0", "ndemo1"}, nc.Spec.DeviceManagerConfigs.Host.IfNames); diff != "" {
		t.Errorf("host manager ifNames (-want +got):\n%s", diff)
	}
	raw, err := json.Marshal(claimParams())
	if err != nil {
		t.Fatal(err)
	}
	dc, err := claimconfig.Parse(raw)
	if err != nil {
		t.Fatalf("the claim parameters are invalid: %v", err)
	}
	if dc.GetPodIfName() != wantIfName || dc.GetMtu() != wantMTU || len(dc.GetAddresses()) != 2 || len(dc.GetRoutes()) != 1 {
		t.Errorf("parsed claim parameters: %v", dc)
	}
	if got := claimTemplate().Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw; string(got) != string(raw) {
		t.Errorf("the template carries %s, want %s", got, raw)
	}
	pod := c.pod()
	if pod.Spec.NodeSelector["kubernetes.io/hostname"] != "netdra-dev" || *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != templateName {
		t.Errorf("pod: %+v", pod.Spec)
	}
	if app := pod.Spec.Containers[0]; app.Image != realnode.TestAppImage || app.ImagePullPolicy != corev1.PullNever {
		t.Errorf("the container runs %s (pull %s), want the real node's test app %s, never pulled", app.Image, app.ImagePullPolicy, realnode.TestAppImage)
	}
	if got := pod.Annotations[realnode.RequiredPluginsAnnotation]; got != `["netdra"]` {
		t.Errorf("the pod requires NRI plugins %q, want netdra's", got)
	}
}

func TestReadEnv(t *testing.T) {
	path := t.TempDir() + "/world.env"
	if err := os.WriteFile(path, []byte("KUBECONFIG=/a/b\nTESTWORLD_NODE=n\n\nJUNK\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"KUBECONFIG": "/a/b", "TESTWORLD_NODE": "n"}, got); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

// TestProcessesUnder finds a process by a path in its arguments, and not
// this test's own process.
func TestProcessesUnder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/x", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("tail", "-f", dir+"/x")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Start returns once the exec began; the kernel shows the new
	// arguments in /proc a moment later, and until then tail is no
	// process under dir.
	cmdline := fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(cmdline); strings.Contains(string(b), dir) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tail's arguments never showed in %s", cmdline)
		}
	}
	got := processesUnder(dir)
	if diff := cmp.Diff([]int{cmd.Process.Pid}, got); diff != "" {
		t.Errorf("processes under %s (-want +got):\n%s", dir, diff)
	}
	if got := processesUnder(dir + "x"); len(got) != 0 {
		t.Errorf("a sibling path matched: %v", got)
	}
}

// TestProcStop: stop ends a process with SIGTERM, and kills one that
// ignores it after the grace period, saying so.
func TestProcStop(t *testing.T) {
	dir := t.TempDir()
	p, err := startProc("sleeper", dir+"/log", "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	if p.running() {
		t.Error("still running")
	}
	p, err = startProc("stubborn", dir+"/log", "sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done")
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(readFile(t, dir+"/log"), "ready") {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("stop of a process ignoring SIGTERM: %v, want killed", err)
	}
	if p.running() {
		t.Error("still running")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
