#!/usr/bin/env bash
# `make upgrade-test [FROM=<rev>] [SCENARIO=upgrade|rollback]`: a release
# rolled out under load as an operator would roll it, from a previous release
# built from git to this checkout (tests/tests/upgrade.rs says what it checks).
#
# FROM defaults to the last tag (v*) reachable from HEAD that is not HEAD
# itself, else 7a6b34a. The previous release is built once into a cache:
#   target/releases/<sha>/src    its sources (git archive)
#   target/releases/<sha>/bin    its binaries, with a .built marker
#   target/releases/build        one target dir shared by every old release,
#                                seeded once from target/debug's dependencies
# The current release is `cargo build --workspace --bins` (target/debug).
#
#   deploy/local/upgrade-test.sh --build-only [FROM]   build FROM, print its bin dir
#   SCENARIO=rollback deploy/local/upgrade-test.sh     one scenario (default: both)
#   ONCEHOOK_UPGRADE_SECS=120 ...                      a shorter load (default 240 s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
CARGO=${CARGO:-cargo}

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

FROM=${FROM:-$(default_from)}
sha=$(git rev-parse --verify --quiet "$FROM^{commit}") || {
  echo "upgrade-test: FROM=$FROM is not a commit of this repository" >&2
  exit 2
}
rel="$root/target/releases/$sha"
shared="$root/target/releases/build"

build_release() {
  if [ -f "$rel/bin/.built" ]; then
    echo "upgrade-test: $FROM ($sha) already built: $rel/bin"
    return
  fi
  echo "upgrade-test: building $FROM ($sha) from git into $rel (the first time takes minutes)"
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
  local n=0
  for f in "$shared"/debug/oncehook*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    # The binaries this release declares, not another release's left in the shared dir.
    name=$(basename "$f")
    if grep -rqs --include=Cargo.toml "name = \"$name\"" "$rel/src/crates"; then
      cp "$f" "$rel/bin/"
      n=$((n + 1))
    fi
  done
  [ "$n" -gt 0 ] || { echo "upgrade-test: no binaries built for $sha" >&2; exit 1; }
  printf '%s\n%s\n' "$sha" "built $(date -u +%FT%TZ) from $FROM" > "$rel/bin/.built"
  echo "upgrade-test: $n binaries in $rel/bin"
}

build_release
if [ "$build_only" = 1 ]; then
  echo "$rel/bin"
  exit 0
fi

bash deploy/local/services.sh
$CARGO build --workspace --bins

# What the report names: the previous release (its tag too), and this
# checkout (-dirty when the work tree differs from HEAD).
short=$(git rev-parse --short=7 "$sha")
from_label=$short
[ "$FROM" != "$short" ] && [ "$FROM" != "$sha" ] && from_label="$FROM ($short)"
to_label=$(git rev-parse --short=7 HEAD)
[ -n "$(git status --porcelain)" ] && to_label="$to_label-dirty"

filter=()
[ -n "${SCENARIO:-}" ] && filter=("$SCENARIO" --exact)
rm -f target/upgrade-report.md
rc=0
ONCEHOOK_UPGRADE_FROM_BIN="$rel/bin" \
ONCEHOOK_UPGRADE_FROM_REV="$from_label" \
ONCEHOOK_UPGRADE_TO_REV="$to_label" \
  $CARGO test -p oncehook-e2e --test upgrade -- --nocapture --test-threads=1 "${filter[@]}" || rc=$?
echo
echo "| date | from | to | scenario | orders | deliveries | order events | versions checked | refund intents | updated_after | duration | result |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
cat target/upgrade-report.md 2>/dev/null || true
exit "$rc"
