// Command pause is the real node's sandbox image: the process that holds a
// pod's namespaces. It reaps the children it inherits and exits on SIGINT
// or SIGTERM, like registry.k8s.io/pause, as a static Go binary because no
// registry is reachable from the project's machines.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range ch {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
