package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dump is a test app's first dump as it prints it, net1 as the demo claim
// asks.
const dump = `testapp dump 1 netns=net:[4026532461]
1: lo: <up|loopback|running> mtu 65536 hw 
    inet 127.0.0.1/8
    inet ::1/128
2: eth0: <up|broadcast|multicast|running> mtu 1500 hw 5a:1e:3c:00:00:01
    inet 10.200.17.5/24
4: net1: <up|broadcast|multicast|running> mtu 1400 hw 02:00:00:00:d0:01
    inet 10.40.0.2/24
    inet fd00:40::2/64
    inet fe80::ff:fe00:d001/64
route 10.200.17.0/24 dev eth0
route 10.40.0.0/24 dev net1
route 10.41.0.0/16 via 10.40.0.1 dev net1
route fd00:40::/64 dev net1
testapp end 1
`

func TestCheckContainerView(t *testing.T) {
	tests := []struct {
		name    string
		view    string
		wantErr string
	}{
		{name: "as the claim asks", view: dump},
		{name: "no net1", view: strings.ReplaceAll(dump, "net1", "net2"), wantErr: "does not see net1"},
		{name: "down", view: strings.Replace(dump, "<up|broadcast|multicast|running> mtu 1400", "<broadcast|multicast> mtu 1400", 1), wantErr: "without up"},
		{name: "its own MAC and MTU", view: strings.Replace(dump, "mtu 1400 hw 02:00:00:00:d0:01", "mtu 1500 hw 02:00:00:00:de:00", 1),
			wantErr: "without MAC 02:00:00:00:d0:01, MTU 1400"},
		{name: "no IPv6 address", view: strings.Replace(dump, "    inet fd00:40::2/64\n", "", 1), wantErr: "without address fd00:40::2/64"},
		{name: "an address of another link", view: strings.Replace(dump, "    inet 10.40.0.2/24\n", "", 1) + "    inet 10.40.0.2/24\n",
			wantErr: "without address 10.40.0.2/24"},
		{name: "no route", view: strings.Replace(dump, "route 10.41.0.0/16 via 10.40.0.1 dev net1\n", "", 1),
			wantErr: "without route 10.41.0.0/16 via 10.40.0.1 dev net1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkContainerView(tt.view)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestReadContainerLog: the CRI log format's prefixes go, a line the
// runtime split (P, then F) is whole again, and firstDump takes the first
// complete dump only.
func TestReadContainerLog(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: "u-1"}}
	nodeDir := t.TempDir()
	path := realnode.ContainerLogPath(nodeDir, pod.Namespace, pod.Name, pod.UID, "app", 0)
	if want := filepath.Join(nodeDir, "podlogs", "default_demo_u-1", "app", "0.log"); path != want {
		t.Errorf("log path %s, want %s", path, want)
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(dump, "\n"), "\n") {
		if l == "route 10.41.0.0/16 via 10.40.0.1 dev net1" { // split by the runtime
			b.WriteString("2026-12-01T11:00:00.000000001Z stdout P route 10.41.0.0/16 \n")
			b.WriteString("2026-12-01T11:00:00.000000002Z stdout F via 10.40.0.1 dev net1\n")
			continue
		}
		b.WriteString("2026-12-01T11:00:00.000000000Z stdout F " + l + "\n")
	}
	b.WriteString("2026-12-01T11:00:30.000000000Z stdout F testapp dump 2 netns=net:[4026532461]\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := realnode.ReadContainerLog(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := firstDump(log)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dump, got); diff != "" {
		t.Errorf("first dump (-want +got):\n%s", diff)
	}
	if _, err := firstDump(strings.TrimSuffix(dump, "testapp end 1\n")); err == nil {
		t.Error("firstDump took a dump without its end")
	}
}
