// Package benchworld benchmarks netdra against the test world's real
// kube-apiserver (points 2 and 4 of issue 10): a claim's prepare through
// the kubelet's DRA protocol to the status written in the apiserver, and
// 1,024 devices from discovery to every ResourceSlice published. Its
// figures go to $NETDRA_BENCH_OUT (see bench/figures) and from there into
// bench/RESULTS.md; `make bench` runs it. Nothing here asserts a figure.
package benchworld
