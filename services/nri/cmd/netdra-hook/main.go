// Command netdra-hook is netdra's OCI createRuntime hook, which runc runs
// as it creates a container, before the container's program starts:
//
//	netdra-hook check-netns [-socket S] -ifname net1 [-ifname net2 ...]
//	netdra-hook wait-attached -socket S -pod UID -netns PATH
//
// check-netns is on every netdra CDI device (dra's -netns-hook, Check in
// netns.go): with -socket (dra's -gate-socket) it waits on nri's gate
// until the pod's devices are attached, then checks that they are in the
// container's netns, so a container of a claim runs this one hook.
// wait-attached is nri's own gate hook (-gate-hook, package gatehook), on
// a container created while its pod's attach runs that has no check-netns
// with -socket. Each reads the OCI state on stdin and exits 0, or 1 with
// the reason on stderr, which the runtime reports as the container's
// creation error; 2 for bad arguments. It is a binary of its own, not an
// nri subcommand, so that it starts in about the time of an empty Go
// program: it links the standard library and its own packages only (no
// gRPC runtime, no net/http, no Prometheus, no NRI). nri's
// `install-hook` copies it onto the host.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/shared/hookargs"
	"github.com/netdra/netdra/shared/process/args"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stderr))
}

func run(args []string, stdin io.Reader, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case hookargs.CheckNetns:
			return checkNetns(args[1:], stdin, stderr)
		case hookargs.WaitAttached:
			return waitAttached(args[1:], stdin, stderr)
		}
	}
	fmt.Fprintf(stderr, "usage: netdra-hook %s|%s [flags] (an OCI createRuntime hook: the OCI state on stdin)\n", hookargs.CheckNetns, hookargs.WaitAttached)
	return 2
}

// checkNetns is `netdra-hook check-netns [-socket S] -ifname net1
// [-ifname net2 ...]`, the hook dra puts on netdra's CDI devices: exit 0
// when nri's gate on S says the pod's devices are attached (without S, no
// question) and every interface is in the container's netns.
func checkNetns(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("netdra-hook "+hookargs.CheckNetns, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Check
	fs.Func(hookargs.FlagIfName, "an interface that must be in the container's netns (repeatable)", func(s string) error {
		c.IfNames = append(c.IfNames, s)
		return nil
	})
	fs.StringVar(&c.ProcRoot, "proc", "/proc", "the proc filesystem")
	fs.StringVar(&c.Socket, hookargs.FlagSocket, "", "nri's gate socket, asked first to wait until the pod's devices are attached; empty: none")
	fs.DurationVar(&c.Wait, "wait", DefaultWait, "how long the gate's answer and the interfaces may take")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := c.Run(stdin); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// waitAttached is `netdra-hook wait-attached -socket S -pod UID -netns
// PATH`, the hook nri's CreateContainer puts on a container whose pod's
// devices are still being attached: exit 0 once they are all in the pod's
// netns.
func waitAttached(argv []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("netdra-hook "+hookargs.WaitAttached, flag.ContinueOnError)
	socket := fs.String(hookargs.FlagSocket, "", "nri's gate socket")
	pod := fs.String(hookargs.FlagPod, "", "the pod's UID")
	netns := fs.String(hookargs.FlagNetns, "", "the pod sandbox's netns path")
	wait := fs.Duration("wait", time.Duration(gatehook.HookTimeout-1)*time.Second, "how long to wait for the attach")
	if code, ok := args.Parse(fs, argv, stderr); !ok {
		return code
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(stdin, 1<<20)) // the OCI state: the runtime writes it
	if err := gatehook.Ask(context.Background(), *socket, gatehook.Request{PodUID: *pod, Netns: *netns}, *wait); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
