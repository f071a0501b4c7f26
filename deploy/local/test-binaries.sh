#!/usr/bin/env bash
# Runs the workspace's test binaries as `cargo test --workspace ARGS` would,
# but several binaries at a time: most end-to-end files wait on processes,
# brokers and databases, not on the two cores. Each binary keeps its own
# tests' concurrency and its own log (target/test-logs/PASS/NAME.log, printed
# in full when it fails). The files that take the machine's shared PostgreSQL
# or RabbitMQ away mid-flight (tests/support/services.rs) or start brokers of
# their own run afterwards, one at a time, with nothing beside them.
#
#   deploy/local/test-binaries.sh PASS [cargo test selection…]
#
# ONCEHOOK_TEST_JOBS sets how many binaries run at once (default 4: most of
# them wait on processes and services; the two cores are far from busy).
# Exits non-zero when any binary failed, after all have run, naming them.
set -euo pipefail
cd "$(dirname "$0")/../.."

pass="${1:?usage: test-binaries.sh PASS [cargo test selection...]}"
shift
jobs="${ONCEHOOK_TEST_JOBS:-4}"
cargo="${CARGO:-cargo}"
# Files that must have the machine to themselves.
alone=" chaos reconciliation_faults broker_nodes "
logs="target/test-logs/$pass"
rm -rf "$logs"
mkdir -p "$logs"

# name<TAB>package directory<TAB>executable, one line per test binary.
list="$logs/binaries.tsv"
"$cargo" test --workspace --no-run --message-format=json "$@" \
  | jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
           | [(.target.kind[0] + "-" + .target.name), (.manifest_path | sub("/Cargo.toml$"; "")), .executable]
           | @tsv' >"$list"
[ -s "$list" ] || { echo "test-binaries: cargo built no test binary for: $*" >&2; exit 1; }

run_one() {
  local name="$1" dir="$2" exe="$3" start rc
  start=$(date +%s)
  rc=0
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe") >"$logs/$name.log" 2>&1 || rc=$?
  echo "$(( $(date +%s) - start )) $name $rc" >>"$logs/times"
  if [ "$rc" -eq 0 ]; then
    printf 'test-binaries[%s]: ok     %-40s %4ss\n' "$pass" "$name" "$(( $(date +%s) - start ))"
  else
    printf 'test-binaries[%s]: FAILED %-40s (exit %s), its log:\n' "$pass" "$name" "$rc"
    sed 's/^/    /' "$logs/$name.log"
  fi
}

# The slowest shared files start first, so the run does not end waiting
# on one of them alone (their times are printed at the end of each run).
slow=" refunds db_trouble mailer_bookkeeping reconciliation console_browser console gateways "
shared=()
solo=()
while IFS=$'\t' read -r name dir exe; do
  short="${name#*-}"
  if [[ "$alone" == *" $short "* ]]; then solo+=("$name"$'\t'"$dir"$'\t'"$exe")
  elif [[ "$name" == test-* && "$slow" == *" $short "* ]]; then shared=("$name"$'\t'"$dir"$'\t'"$exe" "${shared[@]}")
  else shared+=("$name"$'\t'"$dir"$'\t'"$exe"); fi
done <"$list"

echo "test-binaries[$pass]: ${#shared[@]} binaries, $jobs at a time, then ${#solo[@]} alone"
for line in "${shared[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  IFS=$'\t' read -r name dir exe <<<"$line"
  run_one "$name" "$dir" "$exe" &
done
wait
for line in "${solo[@]}"; do
  IFS=$'\t' read -r name dir exe <<<"$line"
  run_one "$name" "$dir" "$exe"
done

echo "test-binaries[$pass]: slowest binaries (seconds):"
sort -rn "$logs/times" | head -n 8 | awk '{ printf "    %5s  %s\n", $1, $2 }'
failed=$(awk '$3 != 0 { print $2 }' "$logs/times")
if [ -n "$failed" ]; then
  echo "test-binaries[$pass]: FAILED:" $failed >&2
  exit 1
fi
echo "test-binaries[$pass]: all $(wc -l <"$logs/times") binaries passed"
