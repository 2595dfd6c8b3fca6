package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/grpcurltest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// The end-to-end tests run the provisioner as a real process: the test
// binary re-executes itself as `provisioner` when this variable is set.
const runEnv = "NETDRA_TEST_RUN_PROVISIONER"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// startProvisioner runs the provisioner inside hostNS, as if that were the
// node's host network namespace, and waits until it serves.
func startProvisioner(t *testing.T, hostNS string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "provisioner.sock")
	cmd := exec.Command("ip", "netns", "exec", hostNS, os.Args[0], "-socket", sock, "-resync", "1s", "-log-level", "debug")
	cmd.Env = append(os.Environ(), runEnv+"=1")
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("provisioner log:\n%s", logs.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rpc.CheckHealth(ctx, sock, "")
		cancel()
		if err == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("provisioner not serving: %v\n%s", err, logs.String())
		}
	}
}

type linkJSON struct {
	IfName    string `json:"ifname"`
	Address   string `json:"address"`
	MTU       int    `json:"mtu"`
	Flags     []string
	AddrInfos []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
		Scope     string `json:"scope"`
	} `json:"addr_info"`
}

func showLink(t *testing.T, ns, name string) (linkJSON, bool) {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-j", "addr", "show", "dev", name).Output()
	if err != nil {
		return linkJSON{}, false
	}
	var links []linkJSON
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j addr: %v %s", err, out)
	}
	return links[0], true
}

func globalAddrs(l linkJSON) []string {
	var out []string
	for _, a := range l.AddrInfos {
		if a.Scope == "global" {
			out = append(out, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
		}
	}
	slices.Sort(out)
	return out
}

// TestProvisioner_HostVethThroughGrpcurl is the provisioner's job done by
// hand with grpcurl: a host veth shows up in WatchDevices, Setup + Attach
// move it into a pod netns under the requested name with its addresses and
// route, and Detach + Free put it back as it was.
func TestProvisioner_HostVethThroughGrpcurl(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	bin := grpcurltest.Binary(t)
	hostNS, podNS := nodetest.Netns(t, "ndh"), nodetest.Netns(t, "ndp")
	nodetest.IP(t, "-n", hostNS, "link", "add", "data0", "address", "02:00:00:00:aa:01", "mtu", "1500", "type", "veth", "peer", "name", "peer0")
	nodetest.IP(t, "-n", hostNS, "link", "add", "other0", "type", "veth", "peer", "name", "other1")
	nodetest.IP(t, "-n", hostNS, "link", "set", "data0", "up")
	before, _ := showLink(t, hostNS, "data0")

	sock := startProvisioner(t, hostNS)
	const svc = "netdra.provisioner.v1.ProvisionerService/"
	if out := grpcurltest.Call(t, bin, sock, "", "list"); !strings.Contains(out, "netdra.provisioner.v1.ProvisionerService") {
		t.Fatalf("list: %s", out)
	}
	grpcurltest.Call(t, bin, sock, `{"managers":{"host":{"enabled":true,"ifNames":["data*"]}}}`, svc+"Configure")

	// WatchDevices streams; grpcurl stops reading after -max-time.
	var watched string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(watched, `"name": "data0"`); {
		watched = grpcurltest.Stream(bin, sock, "", 2*time.Second, svc+"WatchDevices")
		if time.Now().After(deadline) {
			t.Fatalf("data0 never showed up in WatchDevices:\n%s", watched)
		}
	}
	if strings.Contains(watched, "other0") {
		t.Errorf("WatchDevices offers other0, which the config does not select:\n%s", watched)
	}

	// Bad input is refused, naming the field, and touches nothing.
	out, err := grpcurltest.Try(bin, sock, `{"deviceName":"data0","manager":"DEVICE_MANAGER_HOST","config":{"podIfName":"net/1"}}`, svc+"Setup")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "config.podIfName") {
		t.Errorf("Setup with a bad podIfName: %v\n%s", err, out)
	}

	cfg := `{"podIfName":"net1","macAddress":"02:00:00:00:bb:02","mtu":1400,"addresses":["10.10.0.2/24","fd00:10::2/64"],"routes":[{"destination":"10.20.0.0/16","gateway":"10.10.0.1"}]}`
	setup := grpcurltest.Call(t, bin, sock, `{"deviceName":"data0","manager":"DEVICE_MANAGER_HOST","config":`+cfg+`}`, svc+"Setup")
	var prepared struct {
		PreparedDevice json.RawMessage `json:"preparedDevice"`
	}
	if err := json.Unmarshal([]byte(setup), &prepared); err != nil || len(prepared.PreparedDevice) == 0 {
		t.Fatalf("Setup: %v\n%s", err, setup)
	}
	pd := string(prepared.PreparedDevice)
	netns := "/var/run/netns/" + podNS
	grpcurltest.Call(t, bin, sock, `{"preparedDevice":`+pd+`,"netnsPath":"`+netns+`","config":`+cfg+`}`, svc+"Attach")

	if _, ok := showLink(t, hostNS, "data0"); ok {
		t.Error("data0 is still in the host netns after Attach")
	}
	in, ok := showLink(t, podNS, "net1")
	if !ok {
		t.Fatal("net1 is not in the pod netns")
	}
	got := fmt.Sprintf("mac=%s mtu=%d addrs=%v", in.Address, in.MTU, globalAddrs(in))
	if want := "mac=02:00:00:00:bb:02 mtu=1400 addrs=[10.10.0.2/24 fd00:10::2/64]"; got != want {
		t.Errorf("in the pod: %s, want %s", got, want)
	}
	if routes := nodetest.IP(t, "-n", podNS, "route", "show", "10.20.0.0/16"); !strings.Contains(routes, "via 10.10.0.1 dev net1") {
		t.Errorf("route in the pod: %q", routes)
	}
	// Attach again is idempotent.
	grpcurltest.Call(t, bin, sock, `{"preparedDevice":`+pd+`,"netnsPath":"`+netns+`","config":`+cfg+`}`, svc+"Attach")

	grpcurltest.Call(t, bin, sock, `{"preparedDevice":`+pd+`,"netnsPath":"`+netns+`","config":`+cfg+`}`, svc+"Detach")
	grpcurltest.Call(t, bin, sock, `{"preparedDevice":`+pd+`}`, svc+"Free")
	if _, ok := showLink(t, podNS, "net1"); ok {
		t.Error("net1 is still in the pod after Detach")
	}
	after, ok := showLink(t, hostNS, "data0")
	if !ok {
		t.Fatal("data0 is not back in the host netns")
	}
	if diff := cmp.Diff(fmt.Sprintf("%s %d %v", before.Address, before.MTU, globalAddrs(before)),
		fmt.Sprintf("%s %d %v", after.Address, after.MTU, globalAddrs(after))); diff != "" {
		t.Errorf("data0 after Detach + Free (-before +after):\n%s", diff)
	}
}
