// Command kubectl-netdra is netdra's command-line tool for the person on
// call, a kubectl plugin (`kubectl netdra ...` once it is on the PATH; it
// also runs as itself, or renamed netdra): a node's devices, address pools
// and processes, the nodes low on addresses, the claims that failed. It
// reads the cluster and, for a node, execs the processes' inspect
// subcommand in the node's netdra pod; it changes nothing.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/netdra/netdra/services/cli/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := command.New(os.Args[0], os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
