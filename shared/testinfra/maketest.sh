#!/usr/bin/env bash
# maketest.sh: the two lanes of make test, which runs it after the apt
# packages (MAKE: the make to call back).
#
#   setup, unit, checks: the pinned tools, checkgenerate and vet, then the
#           unit tests, then, once the test world's binaries are built, the
#           go.mod files' tidiness, the images', the chart's, the fuzz and
#           the kernel-rig checks (go vet with the kernelrig tag, then the
#           kernel-rig tests) and the test world's go vet;
#   world-build, world: the test world's binaries (Kubernetes from module
#           sources, the real node's kubelet, containerd and CNI plugins),
#           from the start, then the test world's tests once the unit tests
#           are done: they change this host's network (in throwaway
#           namespaces), which the real node's pods use too.
#
# The test world's build and then its tests are the longest path of a cold
# run, so they start first and the rest fits around them: the tools share
# no compiled package with the test world (they pin other Kubernetes
# versions), the unit tests reuse the Kubernetes packages the test world's
# build compiled, and the checks, which compile (fuzzing instruments every
# package again) and run QEMU, wait for the build to end and then fill the
# end-to-end tests' waits (for the kubelet's sync loops, containerd, pods to
# start). Every line is prefixed with its step's name; every step runs to
# its end (a red run shows every failure) and the run fails when one did.
set -euo pipefail
cd "$(dirname "$0")/../.."
make=${MAKE:-make}
# shellcheck source=lanes.sh
source shared/testinfra/lanes.sh
unit_done=$lanes_dir/unit.done
build_done=$lanes_dir/world-build.done
await() { until [[ -e $1 ]]; do sleep 1; done; }

{
  lane setup "$make" --no-print-directory tools checkgenerate vet
  lane unit "$make" --no-print-directory test-unit
  touch "$unit_done"
  await "$build_done"
  lane checks "$make" --no-print-directory tidy test-images chart fuzz vet-kernel test-kernel vet-world
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
