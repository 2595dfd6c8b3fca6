#!/usr/bin/env bash
# gobuild.sh MODULE_DIR OUTPUT PACKAGE [go build flags...]
#
# go build with progress, so that a long first build (Kubernetes from
# module sources: about 7 minutes on 2 cores) is not mistaken for a hang:
# every 15 s a line with the packages compiled so far, every 30 s without
# one (the link of a large binary) a line saying it still works. Cached
# packages are not compiled again: a warm build prints nothing more and
# takes seconds. Any other line go prints (downloads, errors) is passed
# through; the exit status is go build's.
set -euo pipefail
if (($# < 3)); then
  echo "usage: $0 MODULE_DIR OUTPUT PACKAGE [go build flags...]" >&2
  exit 2
fi
dir=$1 out=$(realpath -m "$2") pkg=$3
shift 3
cd "$dir"
mkdir -p "$(dirname "$out")"

elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }
stamp=$(mktemp)
trap 'rm -f "$stamp"; [[ -z ${ticker:-} ]] || kill "$ticker" 2>/dev/null || true' EXIT
(
  # Short sleeps: the one running when the build ends outlives it briefly.
  while :; do
    for _ in {1..30}; do sleep 1; done
    # Quiet for 30 s: compiling one big package, or linking.
    if [[ -z $(find "$stamp" -newermt '-30 seconds' 2>/dev/null) ]]; then
      printf '   ... still building (%s)\n' "$(elapsed)"
    fi
  done
) &
ticker=$!

set +e
"${GO:-go}" build -v "$@" -o "$out" "$pkg" 2>&1 | {
  n=0 last=0
  while IFS= read -r line; do
    if [[ $line =~ ^[A-Za-z0-9._~/+-]+$ ]]; then # a package being compiled
      n=$((n + 1))
      if ((SECONDS - last >= 15)); then
        last=$SECONDS
        touch "$stamp"
        printf '   ... %d package(s) compiled (%s)\n' "$n" "$(elapsed)"
      fi
    else
      printf '%s\n' "$line"
    fi
  done
}
status=${PIPESTATUS[0]}
set -e
if ((status != 0)); then
  exit "$status"
fi
if ((SECONDS >= 10)); then
  printf '   ... built %s in %s\n' "$out" "$(elapsed)"
fi
