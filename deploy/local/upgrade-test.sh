#!/usr/bin/env bash
# `make upgrade-test [FROM=<rev>] [TO=<rev>] [SCENARIO=upgrade|rollback]`:
# a release rolled out under load as an operator would roll it, from a
# previous release built from git to this checkout (tests/tests/upgrade.rs
# says what it checks; docs/reliability.md, "Upgrade test", when to run it).
#
# FROM defaults to the last tag (v*) reachable from HEAD that is not HEAD
# itself, else 7a6b34a. A release named by a revision is built once into a
# cache:
#   target/releases/<sha>/src    its sources (git archive)
#   target/releases/<sha>/bin    its binaries, with a .built marker
#   target/releases/build        one target dir shared by every such build,
#                                seeded once from target/debug's dependencies
# The release rolled to is this work tree (`cargo build --workspace --bins`,
# copied to target/releases/current/bin for the run, reported as HEAD's
# commit, "-dirty" when the work tree differs), or TO=<rev> built from git
# like FROM (a clean commit, whatever the work tree holds).
#
#   deploy/local/upgrade-test.sh --build-only [REV]    build REV (default FROM), print its bin dir
#   SCENARIO=rollback deploy/local/upgrade-test.sh     one scenario (default: both)
#   ONCEHOOK_UPGRADE_SECS=120 ...                      a shorter load (default 240 s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
CARGO=${CARGO:-cargo}
shared="$root/target/releases/build"

build_only=0
if [ "${1:-}" = "--build-only" ]; then
  build_only=1
  shift
  [ -n "${1:-}" ] && FROM=$1
fi

default_from() {
  local tag
  if tag=$(git describe --tags --abbrev=0 --match 'v*' HEAD 2>/dev/null); then
    if [ "$(git rev-parse "$tag^{commit}")" = "$(git rev-parse HEAD)" ]; then
      tag=$(git describe --tags --abbrev=0 --match 'v*' HEAD^ 2>/dev/null) || tag=""
    fi
  else
    tag=""
  fi
  echo "${tag:-7a6b34a}"
}

# The full commit of a revision, or exit.
commit_of() {
  git rev-parse --verify --quiet "$1^{commit}" || {
    echo "upgrade-test: $1 is not a commit of this repository" >&2
    exit 2
  }
}

# "v0.5.0 (7a6b34a)" for a tag, "7a6b34a" for a commit.
label_of() {
  local short
  short=$(git rev-parse --short=7 "$2")
  if [ "$1" != "$short" ] && [ "$1" != "$2" ]; then echo "$1 ($short)"; else echo "$short"; fi
}

# Copies the binaries the crates under $2 declare from $1 to $3 (not
# another release's left in a shared dir); prints how many.
copy_bins() {
  local n=0 f name
  for f in "$1"/oncehook*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    name=$(basename "$f")
    if grep -rqs --include=Cargo.toml "name = \"$name\"" "$2"; then
      cp "$f" "$3/"
      n=$((n + 1))
    fi
  done
  echo "$n"
}

# Builds revision $1 (full commit $2) into target/releases/$2 unless its
# binaries are there already.
build_rev() {
  local rev=$1 sha=$2 rel="$root/target/releases/$2" n
  if [ -f "$rel/bin/.built" ]; then
    echo "upgrade-test: $rev ($sha) already built: $rel/bin"
    return
  fi
  echo "upgrade-test: building $rev ($sha) from git into $rel (the first time takes minutes)"
  rm -rf "$rel/src" "$rel/bin"
  mkdir -p "$rel/src" "$rel/bin"
  git archive "$sha" | tar -x -C "$rel/src"
  # The shared target dir starts with this checkout's compiled dependencies
  # (real copies: cargo rewrites files in place). Only once.
  if [ ! -e "$shared/.seeded" ] && [ -d target/debug/deps ]; then
    # Libraries only (no test executables); a file another build is
    # rewriting meanwhile may vanish: cargo rebuilds what is missing.
    mkdir -p "$shared/debug/deps"
    for d in build .fingerprint; do
      [ -d "target/debug/$d" ] && { cp -a "target/debug/$d" "$shared/debug/" 2>/dev/null || true; }
    done
    find target/debug/deps -maxdepth 1 -type f \( -name 'lib*' -o -name '*.d' \) \
      -exec cp -a -t "$shared/debug/deps/" {} + 2>/dev/null || true
    touch "$shared/.seeded"
  fi
  (cd "$rel/src" && CARGO_TARGET_DIR="$shared" CARGO_INCREMENTAL=0 $CARGO build --workspace --bins)
  n=$(copy_bins "$shared/debug" "$rel/src/crates" "$rel/bin")
  [ "$n" -gt 0 ] || { echo "upgrade-test: no binaries built for $sha" >&2; exit 1; }
  printf '%s\n%s\n' "$sha" "built $(date -u +%FT%TZ) from $rev" > "$rel/bin/.built"
  echo "upgrade-test: $n binaries in $rel/bin"
}

FROM=${FROM:-$(default_from)}
from_sha=$(commit_of "$FROM")
build_rev "$FROM" "$from_sha"
if [ "$build_only" = 1 ]; then
  echo "$root/target/releases/$from_sha/bin"
  exit 0
fi
from_bin="$root/target/releases/$from_sha/bin"
from_label=$(label_of "$FROM" "$from_sha")

bash deploy/local/services.sh
# The test itself (and its support library) is always this work tree's.
$CARGO build --workspace --bins
if [ -n "${TO:-}" ]; then
  to_sha=$(commit_of "$TO")
  build_rev "$TO" "$to_sha"
  to_bin="$root/target/releases/$to_sha/bin"
  to_label=$(label_of "$TO" "$to_sha")
else
  # Copied: another build of this work tree may replace target/debug's
  # binaries while the test runs.
  to_bin="$root/target/releases/current/bin"
  rm -rf "$to_bin" && mkdir -p "$to_bin"
  [ "$(copy_bins target/debug crates "$to_bin")" -gt 0 ] || {
    echo "upgrade-test: no binaries in target/debug" >&2
    exit 1
  }
  to_label=$(git rev-parse --short=7 HEAD)
  [ -n "$(git status --porcelain)" ] && to_label="$to_label-dirty"
fi
echo "upgrade-test: from $from_label ($from_bin) to $to_label ($to_bin)"

# The test's folders (logs, config) under target/, not /tmp: a cleanup of
# /tmp/oncehook-test-* by another run removed one mid-run.
export TMPDIR="$root/target/upgrade-tmp"
mkdir -p "$TMPDIR"

filter=()
[ -n "${SCENARIO:-}" ] && filter=("$SCENARIO" --exact)
rm -f target/upgrade-report.md
rc=0
ONCEHOOK_UPGRADE_FROM_BIN="$from_bin" \
ONCEHOOK_UPGRADE_TO_BIN="$to_bin" ONCEHOOK_BIN_DIR="$to_bin" \
ONCEHOOK_UPGRADE_FROM_REV="$from_label" \
ONCEHOOK_UPGRADE_TO_REV="$to_label" \
  $CARGO test -p oncehook-e2e --test upgrade -- --nocapture --test-threads=1 "${filter[@]}" || rc=$?
echo
echo "| date (UTC) | from | to | scenario | orders | deliveries | order events | versions checked | refund intents | updated_after | duration | result |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
cat target/upgrade-report.md 2>/dev/null || true
exit "$rc"
