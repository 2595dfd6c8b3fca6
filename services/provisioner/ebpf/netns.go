package ebpf

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inNetns runs fn on a locked OS thread that joined the network namespace
// ns (netns.None(): the thread's own). tcx and the BPF query calls resolve
// an interface index in the calling thread's namespace. A thread that
// cannot go back to its namespace stays locked, so the runtime discards it.
func inNetns(ns netns.NsHandle, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening the thread's netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering netns: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leaving netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// ifIndex returns the index of the interface ifName in the calling
// thread's network namespace. It asks the kernel for that one name
// (SIOCGIFINDEX) where net.InterfaceByName dumps every link of the
// namespace and parses them all, garbage that grows with the host's links
// on every attach.
func ifIndex(ifName string) (int, error) {
	ifr, err := unix.NewIfreq(ifName)
	if err != nil {
		return 0, err
	}
	// A socket belongs to the namespace of the thread that made it.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, err
	}
	return int(ifr.Uint32()), nil
}
