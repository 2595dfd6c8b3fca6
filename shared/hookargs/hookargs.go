// Package hookargs is the argument contract of netdra-hook, the OCI
// createRuntime hook binary: the subcommands and flags that its callers
// write into a container's hooks (dra into its CDI specs, nri into a
// container's adjustment) and that its main parses. Both sides use these
// names, so a hook written by one release is parsed by the binary it
// names.
package hookargs

import (
	"path/filepath"
	"slices"
)

// The subcommands.
const (
	// CheckNetns fails the container's creation unless each interface
	// given with FlagIfName is in its network namespace; with FlagSocket,
	// it first waits on nri's gate until the pod's devices are attached
	// (dra's CDI hook).
	CheckNetns = "check-netns"
	// WaitAttached waits until nri has attached every device of the pod
	// to the pod's network namespace (nri's own gate hook, for a
	// container without CheckNetns's).
	WaitAttached = "wait-attached"
)

// The flags.
const (
	FlagIfName = "ifname" // CheckNetns: an interface name, repeatable
	FlagSocket = "socket" // nri's gate socket
	FlagPod    = "pod"    // WaitAttached: the pod's UID
	FlagNetns  = "netns"  // WaitAttached: the pod sandbox's netns path
)

// CheckNetnsArgs are the hook's arguments (argv, from argv[0]) for
// CheckNetns of ifNames, hook being the binary's path, waiting on nri's
// gate at socket first (none when socket is empty).
func CheckNetnsArgs(hook, socket string, ifNames ...string) []string {
	out := []string{filepath.Base(hook), CheckNetns}
	if socket != "" {
		out = append(out, "-"+FlagSocket, socket)
	}
	for _, n := range ifNames {
		out = append(out, "-"+FlagIfName, n)
	}
	return out
}

// WaitsOnGate reports whether a hook's arguments (argv, from argv[0]) are
// CheckNetns's with the gate's socket: the hook waits on nri's gate
// itself, and nri need not add its own.
func WaitsOnGate(argv []string) bool {
	return len(argv) > 2 && argv[1] == CheckNetns && slices.Contains(argv[2:], "-"+FlagSocket)
}

// WaitAttachedArgs are the hook's arguments (argv, from argv[0]) for
// WaitAttached of the pod podUID whose sandbox's netns is netnsPath,
// asking nri on socket.
func WaitAttachedArgs(hook, socket, podUID, netnsPath string) []string {
	return []string{filepath.Base(hook), WaitAttached, "-" + FlagSocket, socket, "-" + FlagPod, podUID, "-" + FlagNetns, netnsPath}
}
