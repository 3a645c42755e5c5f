#!/usr/bin/env bash
# Does the test suite write into the checkout? Runs pytest on a read-only copy of this repository, from an
# empty working directory, and names every file the run created, changed or removed in the copy, and every
# file it left in the working directory (a test writing into its cwd writes into the checkout when pytest
# runs from the repository root, as it usually does). Exit 0: pytest passed and nothing was written.
#
# Usage: scripts/suite_readonly_check.sh [--head] [--keep] [PYTEST ARGS...]
#   --head  copy the last commit (git clone), not the working tree (tracked and untracked, not ignored files)
#   --keep  leave the copy and the working directory behind (their paths are printed)
#   PYTEST ARGS: passed on (default -x -q); an argument starting with tests/ names a file in the copy, e.g.
#     scripts/suite_readonly_check.sh tests/test_cli.py tests/test_tryfix.py -k "cli or crashed" -x -q
# chmod -R a-w stops a normal user's writes (they fail as test errors); root writes all the same, so the
# listings before and after (git status --porcelain --ignored, and every file's size and mtime) decide.
set -u -o pipefail
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || exit 2
HEAD_ONLY=0 KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --head) HEAD_ONLY=1; shift ;;
    --keep) KEEP=1; shift ;;
    *) break ;;
  esac
done
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/suite-readonly.XXXXXX") || exit 2
COPY="$SCRATCH/repo" RUNDIR="$SCRATCH/cwd" BASETMP="$SCRATCH/pytest-tmp"
mkdir -p "$RUNDIR" "$BASETMP"
cleanup() {
  chmod -R u+w "$COPY" 2>/dev/null
  if [ "$KEEP" = 1 ]; then echo "kept: $SCRATCH"; else rm -rf "$SCRATCH"; fi
}
trap cleanup EXIT

GIT=(git -c user.name=suite-check -c user.email=suite-check@localhost -c commit.gpgsign=false)
if [ "$HEAD_ONLY" = 1 ]; then
  git clone -q --no-hardlinks "$REPO" "$COPY" || exit 2
else
  # the working tree as it is, uncommitted changes included, committed in a repository of its own so that
  # git status can tell what the suite adds (files deleted but not yet git rm'd are left out)
  mkdir -p "$COPY"
  (cd "$REPO" && git ls-files -z -c -o --exclude-standard \
     | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done | tar -c --null -T - -f -) \
     | tar -x -f - -C "$COPY" || exit 2
  (cd "$COPY" && "${GIT[@]}" init -q && "${GIT[@]}" add -A && "${GIT[@]}" commit -q -m "working tree") || exit 2
fi

snapshot() {  # $1: output prefix
  (cd "$COPY" && git status --porcelain --ignored --untracked-files=all) > "$1.status"
  (cd "$COPY" && find . -path ./.git -prune -o -type f -printf '%P\t%s\t%T@\n' | sort) > "$1.files"
}
snapshot "$SCRATCH/before"
chmod -R a-w "$COPY"

ARGS=()
for a in "$@"; do
  case "$a" in tests/*) ARGS+=("$COPY/$a") ;; *) ARGS+=("$a") ;; esac
done
[ ${#ARGS[@]} -eq 0 ] && ARGS=("$COPY/tests" -x -q)
[ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -q '^tests/' && ARGS=("$COPY/tests" "${ARGS[@]}")

echo "copy: $COPY (read-only), pytest from: $RUNDIR"
(cd "$RUNDIR" && CI=true PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$COPY/src${PYTHONPATH:+:$PYTHONPATH}" \
   python -m pytest -p no:cacheprovider --basetemp "$BASETMP" "${ARGS[@]}")
RC=$?

chmod -R u+w "$COPY"
snapshot "$SCRATCH/after"
WROTE=0
CHANGED=$(diff "$SCRATCH/before.status" "$SCRATCH/after.status" | grep '^[<>]')
FILES=$(python - "$SCRATCH/before.files" "$SCRATCH/after.files" <<'EOF'
import sys
def read(path):
    with open(path) as fh:
        return dict(line.rstrip("\n").split("\t", 1) for line in fh if "\t" in line)
before, after = read(sys.argv[1]), read(sys.argv[2])
for path in sorted(set(before) | set(after)):
    state = "created" if path not in before else "removed" if path not in after else "changed"
    if state != "changed" or before[path] != after[path]:
        print(f"{state}\t{path}")
EOF
)
LEFT=$(cd "$RUNDIR" && find . -mindepth 1 -printf '%P\n' | sort)
if [ -n "$CHANGED" ]; then
  WROTE=1
  echo "== git status --porcelain --ignored, before (<) and after (>):"
  echo "$CHANGED"
fi
if [ -n "$FILES" ]; then
  WROTE=1
  echo "== files the suite created, changed or removed in the checkout:"
  echo "$FILES"
fi
if [ -n "$LEFT" ]; then
  WROTE=1
  echo "== files left in pytest's working directory (in the checkout when pytest runs from the repository root):"
  echo "$LEFT"
fi
[ "$WROTE" = 0 ] && echo "== nothing written into the checkout or the working directory"
echo "pytest exit code: $RC"
[ "$RC" = 0 ] && [ "$WROTE" = 0 ]
