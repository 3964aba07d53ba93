#!/usr/bin/env bash
# Regenerates evidence/report.md and its SVG charts: every shipped policy on
# (a) random heterogeneous instances, (b) a slice of the Alibaba GPU trace and
# (c) the published SOS workload, through `gpuctl simulate`; (d) MIG plans
# of random instances and the worked example, through `gpuctl mig plan`;
# (e) the mig-plan policy on a shifting mix, through `gpuctl simulate`.
#
#   evidence/regenerate.sh            # from the repository root or anywhere
#
# Needs ../shared/data beside the repository for (b) and (c); without it those
# sections say so. Every policy runs at its default parameters (sos with the
# published alpha 0.6); on the SOS workload, about 7x overloaded, sa-greedy and
# edf-hier are in their overload mode (more than 256 tasks pending: fewer
# annealing iterations, the exhaustive search instead of the MILP;
# docs/policies.md), so a replay there takes about 2 s of CPU at most.
set -euo pipefail
cd "$(dirname "$0")/.."

POLICIES=(fifo greedy-eft sa-greedy sos edf-hier)
SEEDS=(1 2 3)
REPEAT=3
SHARED=../shared/data
OUT=evidence

say() { printf '== %s\n' "$*" >&2; }

say "building gpuctl and the plugins (release)"
cargo build --release --quiet
GPUCTL=target/release/gpuctl

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
policy_args=()
for p in "${POLICIES[@]}"; do policy_args+=(--policy "$p"); done

# compare NAME HOST TRACE REPEAT [gpuctl simulate options...]: table, chart, JSON.
compare() {
    local name=$1 host=$2 trace=$3 repeat=$4
    shift 4
    say "$name: ${POLICIES[*]}"
    "$GPUCTL" simulate --host "$host" --trace "$trace" "${policy_args[@]}" "$@" \
        --repeat "$repeat" --markdown "$work/$name.md" --chart "$OUT/$name.svg" \
        --json >"$work/$name.json"
}

say "wrong run-time estimates (the trace's actual column)"
python3 "$OUT/misestimates.py" "$GPUCTL" 1 2 3 >"$OUT/misestimates.md"

rm -f "$OUT"/*.svg
for seed in "${SEEDS[@]}"; do
    python3 "$OUT/gen_random.py" "$seed" "$work/random-$seed.toml" "$work/random-$seed.csv"
    compare "random-$seed" "$work/random-$seed.toml" "$work/random-$seed.csv" "$REPEAT"
done
for p in greedy-eft sa-greedy; do
    say "gantt: $p on random-1"
    "$GPUCTL" simulate --host "$work/random-1.toml" --trace "$work/random-1.csv" \
        --policy "$p" --gantt "$OUT/gantt-random-1-$p.svg" >/dev/null
done

ALIBABA_SLICE=(--gpus 32 --from 11600000 --limit 1000)
if [ -d "$SHARED/traces/alibaba-gpu-v2023" ]; then
    say "importing the Alibaba slice"
    "$GPUCTL" trace import alibaba-v2023 "$SHARED/traces/alibaba-gpu-v2023/openb_pod_list_default.csv" \
        --nodes "$SHARED/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv" \
        "${ALIBABA_SLICE[@]}" --out-host "$work/alibaba.toml" --out-trace "$work/alibaba.csv" \
        --json >"$work/alibaba-import.json"
    compare alibaba "$work/alibaba.toml" "$work/alibaba.csv" "$REPEAT"
fi
# edf-hier's dealing (docs/policies.md): RR, EDF1, EDF2, EDF3 on the random
# instances (2 groups of their 8 GPUs) and the Alibaba slice (4 groups of 32),
# whose host file has no prices: it is priced here at assumed on-demand list
# prices per GPU-hour (V100 2.48, T4 0.35).
dealing=()
for seed in "${SEEDS[@]}"; do
    dealing+=("random-$seed:$work/random-$seed.toml:$work/random-$seed.csv:2")
done
if [ -f "$work/alibaba.toml" ]; then
    sed -e '/^model = "V100/a cost_per_hour = 2.48' -e '/^model = "T4"/a cost_per_hour = 0.35' \
        "$work/alibaba.toml" >"$work/alibaba-priced.toml"
    dealing+=("alibaba:$work/alibaba-priced.toml:$work/alibaba.csv:4")
fi
say "edf-hier dealing: RR, EDF1, EDF2, EDF3"
python3 "$OUT/edf_dealing.py" "$GPUCTL" "$work" "$REPEAT" "${dealing[@]}"

if [ -f "$SHARED/sos/sim_5_machines.txt" ]; then
    say "converting the SOS workload"
    "$GPUCTL" trace import sos "$SHARED/sos/sim_5_machines.txt" \
        --out-host "$work/sos.toml" --out-trace "$work/sos.csv" --json >"$work/sos-import.json"
    compare sos "$work/sos.toml" "$work/sos.csv" "$REPEAT" --param sos:alpha=0.6
fi

say "MIG planning: random instances and the worked example"
python3 "$OUT/mig_plan.py" "$GPUCTL" "$work" "$work/mig-plan.md"

say "MIG layouts planned from observed demand: mig-plan on a shifting mix"
python3 "$OUT/mig_shift.py" "$GPUCTL" "$work" "$work/mig-shift.md"

say "writing $OUT/report.md"
python3 "$OUT/report.py" "$work" "$OUT/report.md" "${SEEDS[*]}" "${ALIBABA_SLICE[*]}" "$REPEAT"
