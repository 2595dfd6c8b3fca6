package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podNetns asks containerd, through the CRI on its socket, for the network
// namespace of the pod's ready sandbox: its name under /var/run/netns
// (containerd's CNI namespaces are named cni-<uuid>).
func podNetns(ctx context.Context, socket string, podUID types.UID) (string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("containerd's CRI at %s: %w", socket, err)
	}
	defer conn.Close()
	c := runtimeapi.NewRuntimeServiceClient(conn)
	resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(podUID)},
	}})
	if err != nil {
		return "", fmt.Errorf("listing the pod's sandboxes from containerd: %w", err)
	}
	if len(resp.GetItems()) != 1 {
		return "", fmt.Errorf("containerd has %d ready sandboxes of pod %s, want 1", len(resp.GetItems()), podUID)
	}
	st, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.Items[0].Id, Verbose: true})
	if err != nil {
		return "", fmt.Errorf("the pod's sandbox status from containerd: %w", err)
	}
	return netnsOfSandbox(st.GetInfo()["info"])
}

// netnsOfSandbox reads the network namespace's name from containerd's
// verbose sandbox info (the OCI runtime spec it made for the sandbox).
func netnsOfSandbox(info string) (string, error) {
	var v struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(info), &v); err != nil {
		return "", fmt.Errorf("containerd's sandbox info: %w", err)
	}
	for _, ns := range v.RuntimeSpec.Linux.Namespaces {
		if ns.Type != "network" {
			continue
		}
		name := filepath.Base(ns.Path)
		if dir := filepath.Dir(ns.Path); (dir != netnsDir && dir != "/run/netns") || !netnsNameRE.MatchString(name) {
			return "", fmt.Errorf("the pod's network namespace %q is not a named one under %s", ns.Path, netnsDir)
		}
		return name, nil
	}
	return "", errors.New("the pod's sandbox has no network namespace of its own")
}

// containerLogPath is where the kubelet keeps a container's log on the
// real node (its podLogsDir is <node dir>/podlogs), for its first run.
func containerLogPath(nodeDir string, pod *corev1.Pod, container string) string {
	return filepath.Join(nodeDir, "podlogs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container, "0.log")
}

// readContainerLog returns what the container wrote, without the CRI log
// format's prefix of each line ("<time> <stream> <P|F> "; P is part of a
// line that goes on in the next).
func readContainerLog(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			continue
		}
		out.WriteString(f[3])
		if f[2] == "F" {
			out.WriteByte('\n')
		}
	}
	return out.String(), nil
}

// firstDump returns the test app's first complete dump of its network,
// from "testapp dump 1" to "testapp end 1".
func firstDump(log string) (string, error) {
	start := strings.Index(log, "testapp dump 1 ")
	end := strings.Index(log, "testapp end 1\n")
	if start < 0 || end < start {
		return "", errors.New("no complete first dump yet")
	}
	return log[start : end+len("testapp end 1\n")], nil
}

// testappLinkRE is the test app's line of one interface:
// "4: net1: <up|broadcast|multicast|running> mtu 1400 hw 02:00:00:00:d0:01".
var testappLinkRE = regexp.MustCompile(`^\d+: (\S+): <([^>]*)> mtu (\d+) hw (\S*)$`)

// containerLink is what the test app printed of one interface.
type containerLink struct {
	flags []string
	mtu   int
	mac   string
	addrs []string
}

// parseDump reads the interfaces and the routes from a test app's dump.
func parseDump(view string) (links map[string]*containerLink, routes []string) {
	links = map[string]*containerLink{}
	var cur *containerLink
	for _, line := range strings.Split(view, "\n") {
		if m := testappLinkRE.FindStringSubmatch(line); m != nil {
			mtu, _ := strconv.Atoi(m[3])
			cur = &containerLink{flags: strings.Split(m[2], "|"), mtu: mtu, mac: m[4]}
			links[m[1]] = cur
			continue
		}
		if a, ok := strings.CutPrefix(line, "    inet "); ok && cur != nil {
			cur.addrs = append(cur.addrs, a)
			continue
		}
		cur = nil
		if r, ok := strings.CutPrefix(line, "route "); ok {
			routes = append(routes, r)
		}
	}
	return links, routes
}

// checkContainerView checks that the container saw net1 as the claim asks:
// up, with its MAC, MTU, both addresses and the route.
func checkContainerView(view string) error {
	links, routes := parseDump(view)
	l := links[wantIfName]
	if l == nil {
		return fmt.Errorf("the container does not see %s; it saw:\n%s", wantIfName, indent(view))
	}
	var bad []string
	if !slices.Contains(l.flags, "up") {
		bad = append(bad, "up")
	}
	if l.mac != wantMAC {
		bad = append(bad, "MAC "+wantMAC)
	}
	if l.mtu != wantMTU {
		bad = append(bad, fmt.Sprintf("MTU %d", wantMTU))
	}
	for _, a := range []string{wantIPv4, wantIPv6} {
		if !slices.Contains(l.addrs, a) {
			bad = append(bad, "address "+a)
		}
	}
	if route := wantRoute + " via " + wantGateway + " dev " + wantIfName; !slices.Contains(routes, route) {
		bad = append(bad, "route "+route)
	}
	if len(bad) > 0 {
		return fmt.Errorf("the container sees %s without %s; it saw:\n%s", wantIfName, strings.Join(bad, ", "), indent(view))
	}
	return nil
}
