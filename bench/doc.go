// Package bench holds netdra's benchmarks. Each one measures a path of the
// product against a baseline measured in the same run (the machines are
// noisy), and reports the ratio. `make bench` runs them, and those of
// shared/testinfra/testworld/benchworld against the test world's real apiserver,
// with $NETDRA_BENCH_OUT set: they write their figures there (see
// bench/figures), and bench/cmd/benchreport turns them into
// bench/RESULTS.md and bench/latency.png, each figure beside its target in
// bench/targets.yaml. Figures are reported, never asserted.
//
//   - BenchmarkAttach_PipelineVsBaseline: a pod's attach and detach
//     through the real NRI runtime side, nri, state and provisioner
//     processes, against the same netlink calls made directly; 1 and 8
//     devices a pod, 1, 16 and 64 concurrent pods; the namespace moves
//     counted from link events; the processes' RSS.
//   - BenchmarkSriov_Discover_1024VFs: one sr-iov discovery of the fake
//     sysfs tree the inventory benchmark publishes.
//   - BenchmarkState_Prepare_SocketVsDirect: a claim's prepare bookkeeping
//     through the state socket against the store in process.
//   - BenchmarkHook_ExecToExit: the OCI hook a container of a claim runs,
//     netdra-hook, from its exec to its exit, against an empty Go
//     program's.
//
// They need root (network namespaces, veths) and run as plain
// `go test -bench` too; without $NETDRA_BENCH_OUT they only print.
package bench
