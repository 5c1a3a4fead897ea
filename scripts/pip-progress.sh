#!/usr/bin/env bash
# Run a `pip install` and show that it moves: one numbered line per package pip collects, then
# what it installs, instead of minutes of silence (`make install`, so `make demo` and `make
# test` on a fresh clone). The whole log is kept and printed if pip fails.
#   scripts/pip-progress.sh .venv/bin/python -m pip install -e ".[dev]"
set -euo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/memoryd-pip.XXXXXX")
trap 'rm -f "$log"' EXIT
started=$SECONDS
collected=0
status=0
"$@" --progress-bar off 2>&1 | tee "$log" | {
  while IFS= read -r line; do
    case "$line" in
      Collecting\ *|Processing\ *)  # from an index; from a local file or wheel
        collected=$((collected + 1))
        printf '  [%3d] %s\n' "$collected" "${line#* }"
        ;;
      Installing\ collected\ packages:*)
        printf '  installing the %d packages collected (the longest silent step)…\n' "$collected"
        ;;
      Successfully\ installed\ *)
        printf '  installed %d packages\n' "$(wc -w <<<"${line#Successfully installed }")"
        ;;
    esac
  done
} || status=$?
if [ "$status" -ne 0 ]; then
  cat "$log" >&2
  printf 'pip failed (exit %d): its whole output is above\n' "$status" >&2
  exit "$status"
fi
printf '  done in %ds\n' "$((SECONDS - started))"
