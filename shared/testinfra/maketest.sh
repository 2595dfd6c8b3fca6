#!/usr/bin/env bash
# maketest.sh: the two lanes of make test, which runs it after the apt
# packages (MAKE: the make to call back).
#
#   setup, unit, checks: the pinned tools and checkgenerate, then the unit
#           tests and promtool, then, once the test world's binaries are
#           built, go vet, the go.mod files' tidiness, the images', the
#           chart's and the kernel-rig checks (go vet with the kernelrig
#           tag, then the kernel-rig tests) and the test world's go vet;
#   world-build, world: the test world's binaries (Kubernetes from module
#           sources, the real node's kubelet, containerd and CNI plugins),
#           from the start, then the test world's tests once the unit tests
#           are done: they change this host's network (in throwaway
#           namespaces), which the real node's pods use too.
#
# A cold run is compile-bound on 2 cores, and its longest path is the test
# world's build and then its tests, so they start first and only what the
# unit tests need comes before those: go vet, whose analyzers only add to
# what the unit tests compile anyway, and the other checks, which compile
# (the kernel-rig tests build every package again with their tag) and run
# QEMU, wait for the build to end and then fill the end-to-end tests'
# waits (for the kubelet's sync loops, containerd, pods to start). The fuzz
# search is not here: each target's instrumented build compiles its every
# dependency again; the targets' seeds and every input a search ever found
# (testdata/fuzz) run in the unit tests, and `make fuzz` searches. Every
# line is prefixed with its step's name; every step runs to its end (a red
# run shows every failure) and the run fails when one did.
set -euo pipefail
cd "$(dirname "$0")/../.."
make=${MAKE:-make}
# shellcheck source=lanes.sh
source shared/testinfra/lanes.sh
unit_done=$lanes_dir/unit.done
build_done=$lanes_dir/world-build.done
await() { until [[ -e $1 ]]; do sleep 1; done; }

{
  lane setup "$make" --no-print-directory tools checkgenerate
  lane unit "$make" --no-print-directory test-unit promtool
  touch "$unit_done"
  await "$build_done"
  lane checks "$make" --no-print-directory vet tidy test-images chart vet-kernel test-kernel vet-world
} &
{
  lane world-build "$make" --no-print-directory world-bin node-bin
  touch "$build_done"
  await "$unit_done"
  # The tests' control planes run the testworld binary just built, not one
  # linked again into the user cache (a Kubernetes-sized link); the test
  # world's go vet runs in the checks lane.
  TESTWORLD_BIN=$PWD/_output/testworld TESTWORLD_VET=0 lane world "$make" --no-print-directory test-world
} &
wait
lanes_report setup unit checks world-build world
