// Package fanout runs a batch of independent calls at once. netdra sets a
// claim's devices up, and attaches and detaches a pod's devices, so: the
// kernel serializes their namespace moves and link changes (RTNL), but
// not the work around them (netlink round trips, gRPC hops, the state's
// fsyncs, eBPF attachments), which one after the other summed to several
// times the kernel's own cost for 8 devices. A Limit bounds the calls that
// the batches sharing it run at once.
package fanout

import "sync"

// Each runs f(0) to f(n-1) at once and returns their errors, by index,
// when all have returned. n == 1 runs in the caller's goroutine.
func Each(n int, f func(i int) error) []error {
	errs := make([]error, n)
	if n == 1 {
		errs[0] = f(0)
		return errs
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}
