// Package benchworld benchmarks netdra against the test world's real
// kube-apiserver: a claim's prepare through the kubelet's DRA protocol to
// the status written in the apiserver, and 1,024 devices from discovery to
// every ResourceSlice published; and on the real node: pods started with a
// netdra claim and without, one after the other and all at once, a kubelet
// restart, and pods without a claim started alone and beside pods with 8
// netdra devices each.
// Its figures go to $NETDRA_BENCH_OUT (see bench/figures) and from there
// into bench/RESULTS.md; `make bench` runs it. Nothing here asserts a
// figure.
package benchworld
