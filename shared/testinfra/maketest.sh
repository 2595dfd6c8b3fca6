#!/usr/bin/env bash
# maketest.sh: the two lanes of make test, which runs it after the tools,
# checkgenerate, node-deps and vet (MAKE: the make to call back).
#
#   unit, checks: the unit tests, then the go.mod files' tidiness, the
#           images', the chart's, the fuzz and the kernel-rig checks (go
#           vet with the kernelrig tag, then the kernel-rig tests);
#   world-build, world: the test world's binaries (Kubernetes from module
#           sources, the real node's kubelet, containerd and CNI plugins)
#           built beside the unit tests, then the test world's tests once
#           the unit tests are done: they change this host's network (in
#           throwaway namespaces), which the real node's pods use too.
#
# vet has run alone before: it compiles this module's
# dependencies, Kubernetes' client packages among them, which the test
# world's build would otherwise compile at the same moment, twice.
#
# A cold run is mostly compiling, which the two lanes share the cores for;
# the end-to-end tests are mostly waiting (for the kubelet's sync loops,
# containerd, pods to start), which the fuzz and the kernel-rig checks fill.
# Every line is prefixed with its step's name; every step runs to its end
# (a red run shows every failure) and the run fails when one did.
set -euo pipefail
cd "$(dirname "$0")/../.."
make=${MAKE:-make}
# shellcheck source=lanes.sh
source shared/testinfra/lanes.sh
unit_done=$lanes_dir/unit.done

{
  lane unit "$make" --no-print-directory test-unit
  touch "$unit_done"
  lane checks "$make" --no-print-directory tidy test-images chart fuzz vet-kernel test-kernel
} &
{
  lane world-build "$make" --no-print-directory world-bin node-bin
  until [[ -e $unit_done ]]; do sleep 1; done
  # The tests' control planes run the testworld binary just built, not one
  # linked again into the user cache (a Kubernetes-sized link).
  TESTWORLD_BIN=$PWD/_output/testworld lane world "$make" --no-print-directory test-world
} &
wait
lanes_report unit checks world-build world
