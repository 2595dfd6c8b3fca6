# lanes.sh: run steps of a test run side by side, each with its output
# prefixed with its name (bash; source it). make test runs the test world
# beside the other checks with it, and the test world's test.sh its
# end-to-end halves beside each other.
#
#   source shared/testinfra/lanes.sh
#   { lane a cmd1; lane b cmd2; } &    # a then b, in the background
#   lane c cmd3 &                      # beside them
#   wait
#   lanes_report a b c                 # a line per lane; fails when one did
#
# A lane's status is its command's; lanes_report says each, then what the
# failed ones' output says failed, and returns 1 when any failed or never
# finished. Every lane runs to its end: a red run
# still shows every failure.

lanes_dir=$(mktemp -d "${TMPDIR:-/tmp}/netdra-lanes.XXXXXX")

# lane NAME CMD...: CMD's output, each line prefixed with [NAME]; its exit
# status and seconds recorded for lanes_report.
lane() {
  local name=$1 t0=$SECONDS
  shift
  { rc=0; "$@" 2>&1 || rc=$?; echo "$rc $((SECONDS - t0))" >"$lanes_dir/$name.rc"; } | sed -u "s/^/[$name] /" |
    tee "$lanes_dir/$name.log" || true
}

# lanes_failures NAME: the lines of a failed lane's output that say what
# failed (go test's --- FAIL lines, the test files' messages, panics), at
# most 60, each cut at 400 characters: printed again at the end of the run,
# where a reader of its last lines finds them.
lanes_failures() {
  grep -E -- '--- FAIL|^\[[^]]*\]( \[[^]]*\])* +[A-Za-z0-9_]+(_test)?\.go:[0-9]+: |panic: |^\[[^]]*\]( \[[^]]*\])* FAIL' "$lanes_dir/$1.log" 2>/dev/null |
    grep -vE '\.go:[0-9]+: (kubelet log|[a-z]+ log:|.* log of )' | cut -c1-400 | tail -n 60 || true
}

# lanes_report NAME...: a line per lane with its exit status and how long
# it took; returns 1 when any failed or left none.
lanes_report() {
  local name got secs rc=0
  for name in "$@"; do
    got=missing secs=?
    [[ ! -e $lanes_dir/$name.rc ]] || read -r got secs <"$lanes_dir/$name.rc"
    echo ">> $name: rc=$got (${secs}s)"
    [[ $got == 0 ]] || rc=1
  done
  for name in "$@"; do
    got=missing
    [[ ! -e $lanes_dir/$name.rc ]] || read -r got _ <"$lanes_dir/$name.rc"
    [[ $got == 0 ]] && continue
    echo ">> $name failed; what its output says failed:"
    lanes_failures "$name"
  done
  rm -rf "$lanes_dir"
  return $rc
}
