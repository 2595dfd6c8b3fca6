package main

import (
	"cmp"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netdra/netdra/services/nri/gatehook"
)

// TestRun: the subcommands' arguments, stdin and exit codes, as the
// runtime sees them.
func TestRun(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "42", "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	netDev := "Inter-| Receive\n face |bytes\n    lo: 0 0\n  net1: 0 0\n"
	if err := os.WriteFile(filepath.Join(proc, "42", "net", "dev"), []byte(netDev), 0o644); err != nil {
		t.Fatal(err)
	}
	state := `{"ociVersion":"1.2.0","id":"c1","pid":42,"annotations":{"io.kubernetes.cri.sandbox-uid":"u1"}}`
	missingSocket := filepath.Join(t.TempDir(), "none.sock")
	gate := gateServer(t, func(_ context.Context, req gatehook.Request) error {
		if req.PodUID != "u1" {
			return errors.New("netdra: pod " + req.PodUID + ": device data1 (claim default/c): link busy")
		}
		return nil
	})
	for _, tc := range []struct {
		name      string
		args      []string
		stdin     string // "": state
		code      int
		wantInErr string
	}{
		{name: "check-netns: the gate says attached", args: []string{"check-netns", "-proc", proc, "-socket", gate, "-ifname", "net1"}},
		{name: "check-netns: the gate refuses", args: []string{"check-netns", "-proc", proc, "-socket", gate, "-ifname", "net1"}, code: 1,
			stdin: `{"id":"c1","pid":42,"annotations":{"io.kubernetes.cri.sandbox-uid":"u2"}}`, wantInErr: "netdra: pod u2: device data1 (claim default/c): link busy"},
		{name: "check-netns: the pod from the kubelet's label", args: []string{"check-netns", "-proc", proc, "-socket", gate, "-ifname", "net1"},
			stdin: `{"id":"c1","pid":42,"annotations":{"io.kubernetes.pod.uid":"u1"}}`},
		{name: "check-netns: no pod in the OCI state", args: []string{"check-netns", "-proc", proc, "-socket", gate, "-ifname", "net1"}, code: 1,
			stdin: `{"id":"c1","pid":42}`, wantInErr: "names no pod (no annotation io.kubernetes.cri.sandbox-uid or io.kubernetes.pod.uid)"},
		{name: "check-netns: nri gone, the device missing", args: []string{"check-netns", "-proc", proc, "-socket", missingSocket, "-ifname", "net2"}, code: 1,
			wantInErr: "netdra: net2 not in the network namespace of container c1, and netdra's nri plugin is not running (its gate socket: dial unix " + missingSocket},
		{name: "check-netns: nri gone, the device there", args: []string{"check-netns", "-proc", proc, "-socket", missingSocket, "-ifname", "net1"}, code: 1,
			wantInErr: "netdra: container c1 of pod u1 refused: netdra's nri plugin is not running"},
		{name: "check-netns: the gate's word, the device not there", args: []string{"check-netns", "-proc", proc, "-socket", gate, "-wait", "200ms", "-ifname", "net2"}, code: 1,
			wantInErr: "netdra: net2 not in the network namespace of container c1"},
		{name: "no subcommand", args: nil, code: 2, wantInErr: "usage: netdra-hook check-netns|wait-attached"},
		{name: "unknown subcommand", args: []string{"install-hook", "/x"}, code: 2, wantInErr: "usage:"},
		{name: "check-netns: there", args: []string{"check-netns", "-proc", proc, "-ifname", "net1"}},
		{name: "check-netns: missing", args: []string{"check-netns", "-proc", proc, "-wait", "0s", "-ifname", "net2"}, code: 1,
			wantInErr: "netdra: net2 not in the network namespace of container c1"},
		{name: "check-netns: bad flag", args: []string{"check-netns", "-nope"}, code: 2, wantInErr: "flag provided but not defined: -nope"},
		{name: "wait-attached: help", args: []string{"wait-attached", "-h"}, code: 0, wantInErr: "Usage of netdra-hook wait-attached"},
		{name: "wait-attached: extra arguments", args: []string{"wait-attached", "-pod", "u", "extra"}, code: 2, wantInErr: `unexpected arguments: ["extra"]`},
		{name: "wait-attached: nri not there", args: []string{"wait-attached", "-socket", missingSocket, "-pod", "u", "-netns", "/n", "-wait", "100ms"}, code: 1,
			wantInErr: "netdra: the container is not started without its pod's devices: netdra's nri plugin is not running (its gate socket: dial unix " + missingSocket},
		{name: "wait-attached: attached", args: []string{"wait-attached", "-socket", gate, "-pod", "u1", "-netns", "/n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			code := run(tc.args, strings.NewReader(cmp.Or(tc.stdin, state)), &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.wantInErr) {
				t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.wantInErr)
			}
		})
	}
}

// gateServer serves nri's side of the gate with wait until the test ends,
// and returns its socket.
func gateServer(t *testing.T, wait func(context.Context, gatehook.Request) error) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "gate.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = gatehook.Server{Wait: wait}.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}
