#!/usr/bin/env bash
# Run by ctest after the integration tests (a FIXTURES_CLEANUP step): removes what a test
# binary that crashed could not (its spaced was killed with it, but sandboxes run detached):
# containers, mounts and data dirs of /tmp/space-it-* that no live spaced uses.
# Prints what it removed; a clean run prints "nothing left behind".
set -uo pipefail
here=$(dirname "$0")
left=0
for dir in /tmp/space-it-*; do
  [ -d "$dir" ] || continue
  if pgrep -f -- "--data-dir $dir/data" >/dev/null 2>&1; then continue; fi
  echo "cleanup: removing leftovers of $dir"
  bash "$here/space-down.sh" "$dir/data" --purge || true
  rm -rf "$dir"
  left=$((left + 1))
done
[ "$left" -eq 0 ] && echo "cleanup: nothing left behind"
exit 0
