package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	state := `{"ociVersion":"1.2.0","id":"c1","pid":42}`
	missingSocket := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		wantInErr string
	}{
		{name: "no subcommand", args: nil, code: 2, wantInErr: "usage: netdra-hook check-netns|wait-attached"},
		{name: "unknown subcommand", args: []string{"install-hook", "/x"}, code: 2, wantInErr: "usage:"},
		{name: "check-netns: there", args: []string{"check-netns", "-proc", proc, "-ifname", "net1"}},
		{name: "check-netns: missing", args: []string{"check-netns", "-proc", proc, "-wait", "0s", "-ifname", "net2"}, code: 1,
			wantInErr: "netdra: net2 not in the network namespace of container c1"},
		{name: "check-netns: bad flag", args: []string{"check-netns", "-nope"}, code: 2, wantInErr: "flag provided but not defined: -nope"},
		{name: "wait-attached: help", args: []string{"wait-attached", "-h"}, code: 0, wantInErr: "Usage of netdra-hook wait-attached"},
		{name: "wait-attached: extra arguments", args: []string{"wait-attached", "-pod", "u", "extra"}, code: 2, wantInErr: `unexpected arguments: ["extra"]`},
		{name: "wait-attached: nri not there", args: []string{"wait-attached", "-socket", missingSocket, "-pod", "u", "-netns", "/n", "-wait", "100ms"}, code: 1,
			wantInErr: "netdra: the container is not started without its pod's devices: netdra's nri plugin (" + missingSocket + ") did not say they are attached within 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			code := run(tc.args, strings.NewReader(state), &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.wantInErr) {
				t.Errorf("run(%q) = %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.wantInErr)
			}
		})
	}
}
