#!/usr/bin/env bash
# Regenerates evidence/dvfs/report.md and savings.svg: the DVFS paper's
# experiments (docs/dvfs.md §5) through `gpuctl dvfs paper`, beside the
# authors' rows (examples/dvfs/paper-*-results.csv).
#
#   evidence/dvfs/regenerate.sh        # GPUCTL=path/to/gpuctl to skip the build
#
# Every configuration is the mean of SETS seeded task sets (seeds 1 ... SETS),
# each run with and without DVFS under the same rule. About two minutes on
# two cores after the build.
set -euo pipefail
cd "$(dirname "$0")/../.."

SETS=${SETS:-20}
OUT=evidence/dvfs
say() { printf '== %s\n' "$*" >&2; }

if [ -z "${GPUCTL:-}" ]; then
    say "building gpuctl (release)"
    cargo build --release --quiet -p gpu-agent-cli
    GPUCTL=target/release/gpuctl
fi
# WORK=DIR keeps the runs' JSON there (and reuses what it holds).
if [ -n "${WORK:-}" ]; then
    work=$WORK
    mkdir -p "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi

# run NAME [gpuctl dvfs paper options...]
run() {
    local name=$1
    shift
    [ -s "$work/$name.json" ] && return
    say "$name"
    "$GPUCTL" dvfs paper --sets "$SETS" --json "$@" >"$work/$name.json"
}

for l in 1 16; do
    for u in 0.2 0.4 0.6 0.8 1.0 1.2 1.4 1.6; do
        run "offline-l$l-u$u-t1-compat" --gpus-per-server "$l" --util "$u" --theta 1 --compat
    done
done
for t in 0.9 0.5; do
    run "offline-l16-u1.6-t$t-compat" --gpus-per-server 16 --util 1.6 --theta "$t" --compat
done
run offline-l1-u1.0-t1-agent --gpus-per-server 1 --util 1.0 --theta 1
run offline-l16-u1.6-t1-agent --gpus-per-server 16 --util 1.6 --theta 1
for a in edf-bf edf-wf lpt-ff; do
    run "offline-l16-u1.6-$a-agent" --gpus-per-server 16 --util 1.6 --algo "$a"
done
for l in 1 16; do
    run "online-l$l-t1-compat" --mode online --gpus-per-server "$l" --util 1.6 --theta 1 --compat
    run "online-l$l-t1-agent" --mode online --gpus-per-server "$l" --util 1.6 --theta 1
done
run online-l16-t0.9-agent --mode online --gpus-per-server 16 --util 1.6 --theta 0.9
run online-l16-bin-agent --mode online --gpus-per-server 16 --util 1.6 --algo bin

say "writing $OUT/report.md"
python3 "$OUT/report.py" "$work" "$OUT" "$SETS"
