package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

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
