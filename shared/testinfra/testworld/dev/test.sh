#!/usr/bin/env bash
# test.sh: the test world's tests, as make test-world runs them (as root).
#
# The end-to-end tests spend most of their time waiting (for the kubelet's
# sync loops, containerd, pods to start), so they run in two test
# processes at once, each with its own control plane and real nodes (the
# real node's host snapshot is shared between processes: see
# realnode/hostusers.go). The install tests, which share the DaemonSet's
# host paths and host ports, and make dev's (TestE2E_Dev[A-Z]*), whose demo
# listens on the same metrics ports, all go to the second half, as one
# item; the CRI-O tests run after the first half (below). The other tests
# are dealt longest first, each to the half with less time dealt so far,
# by the seconds each took in a CI run (dev/e2e-seconds.tsv; a test not
# listed counts as e2eDefaultSeconds), so that both halves end together.
# The other packages run one at a time beside both halves, not before
# them: they would hold back the longest path of a run.
# Each lane's output is prefixed with its name; the exit status is the
# first failure's.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
timeout=${TESTWORLD_TIMEOUT:-40m}
# shellcheck source=../../lanes.sh
source ../lanes.sh

# The alert rules' tests run $PROMTOOL (make builds the pinned one); under
# NETDRA_TEST_STRICT=1 they fail without it rather than build their own.
if [[ ${NETDRA_TEST_STRICT:-} == 1 && ! -x ${PROMTOOL:-} ]]; then
  echo "test.sh: PROMTOOL (${PROMTOOL:-unset}) is no executable, and NETDRA_TEST_STRICT=1: run it through make test-world" >&2
  exit 1
fi

# go vet with every analyzer; the go tests below then run with -vet=off:
# their own vet, a subset of these analyzers under other flags, would
# type-check each of Kubernetes' packages once more for its facts.
# TESTWORLD_VET=0 leaves it to the caller (make test runs it beside the
# end-to-end tests, off their path).
if [[ ${TESTWORLD_VET:-1} != 0 ]]; then
  "$go" vet ./...
fi
# One build of the e2e test binary, listed; both halves reuse the cache.
mapfile -t tests < <("$go" test -vet=off -count=1 -list '^Test' ./e2e/ | grep '^Test')
declare -A seconds=()
while read -r name secs; do
  [[ -z $name || $name == \#* ]] || seconds[$name]=${secs%.*}
done <dev/e2e-seconds.tsv
e2eDefaultSeconds=30
took() { echo "${seconds[$1]:-$e2eDefaultSeconds}"; }
first=() second=() crio=() rest=()
load1=0 load2=0
for t in "${tests[@]}"; do
  if [[ $t == TestE2E_CRIO* ]]; then
    crio+=("$t")
    ((load1 += $(took "$t"))) || true
  elif [[ $t == TestE2E_Install* || $t == TestE2E_Dev[A-Z]* ]]; then
    second+=("$t")
    ((load2 += $(took "$t"))) || true
  else
    rest+=("$(took "$t") $t")
  fi
done
while read -r secs t; do
  [[ -n $t ]] || continue
  if ((load1 <= load2)); then
    first+=("$t")
    ((load1 += secs)) || true
  else
    second+=("$t")
    ((load2 += secs)) || true
  fi
done < <(printf "%s\n" "${rest[@]}" | sort -k1,1nr -k2,2)
regex() { local IFS='|'; echo "^($*)\$"; }
others=$("$go" list ./... | grep -v '/e2e$')

# e2e FLAGS...: go test -v of the end-to-end package, a passing test's
# log dropped: its "--- PASS: TestX (Ns)" line stays, so that the run's
# log says what each test took (what the halves above are dealt to
# balance). A failing test's log is printed whole, as is what follows the
# last test's result (a timeout's panic, the package's ok or FAIL line);
# the status is go test's (pipefail).
e2e() {
  "$go" test -v -vet=off -count=1 -p 1 -timeout "$timeout" "$@" ./e2e/ | awk '
    /^=== (RUN|PAUSE|CONT|NAME) / || /^ +--- (PASS|SKIP): / { next }
    /^ +--- FAIL: / { print; next }
    /^--- (PASS|SKIP): / { print; fflush(); n = 0; next }
    /^--- FAIL: / { for (i = 0; i < n; i++) print buf[i]; print; fflush(); n = 0; next }
    { buf[n++] = $0 }
    END { for (i = 0; i < n; i++) print buf[i] }'
}

# CRI-O's node takes a build of its own (minutes the first time): it is
# built beside the first tests when TESTWORLD_BIN is given, and the
# TestE2E_CRIO* tests run after the first half's, in a test process of
# their own.
first_then_crio() {
  local rc=0
  e2e -run "$(regex "${first[@]}")" || rc=$?
  if ((${#crio[@]})); then
    e2e -run "$(regex "${crio[@]}")" || rc=$?
  fi
  return $rc
}

echo ">> test world: ${#first[@]} + ${#crio[@]} (CRI-O) + ${#second[@]} end-to-end tests in two processes (dealt ${load1} s + ${load2} s, by dev/e2e-seconds.tsv)"
[[ -z ${TESTWORLD_BIN:-} ]] || lane crio-build "$TESTWORLD_BIN" build-node -crio &
lane packages "$go" test -vet=off -count=1 -p 1 -timeout "$timeout" $others &
lane e2e-1 first_then_crio &
lane e2e-2 e2e -run "$(regex "${second[@]}")" &
wait
lanes=(packages e2e-1 e2e-2)
[[ -z ${TESTWORLD_BIN:-} ]] || lanes+=(crio-build)
lanes_report "${lanes[@]}"
