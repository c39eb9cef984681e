#!/usr/bin/env bash
# gpuscope try on GPU programs: each fix applied by gpuscope's launcher against the same fix written by
# hand in the client program (tests/workloads/clients/, the harness's --variant), both timed as gains
# over the program as written. A fix whose gain through gpuscope lies more than TOLERANCE (share of the
# step, default 0.10) from the hand-applied one fails the check; so does a fix gpuscope did not apply.
#
#     OUT=/tmp/out bash tests/device/try_check.sh        # ~15 minutes on one H100
#     OUT=/tmp/out TRY_GPUS="2 3" TRY_ONLY=resnet bash tests/device/try_check.sh
#
# TRY_GPUS: the GPUs to deal the cases to (one at a time on each, in parallel across them; default
# "0"); TRY_ONLY: run only the cases whose name matches this regular expression.
# Needs: python3 with a CUDA build of torch, transformers and torchvision; PYTHONPATH set as for
# real_clients.sh. ROUNDS (default 3): rounds of both measurements.
set -u
OUT=${OUT:-/tmp/gpuscope-device}
ROUNDS=${ROUNDS:-3}
TOLERANCE=${TOLERANCE:-0.10}
mkdir -p "$OUT/try"
export PYTHONPATH=${PYTHONPATH:-$PWD/src} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C=tests/workloads/clients
# program  gpuscope's fix  the client's hand-applied variant
CASES="
$C/torch_transformer_lm_fp32.py tf32 tf32
$C/torch_transformer_lm_fp32.py bf16_autocast bf16_autocast
$C/hf_gpt2_train.py tf32 tf32
$C/hf_gpt2_train.py bf16_autocast bf16_autocast
$C/eager_norm_chain.py compile compiled
$C/tv_resnet18_infer.py compile compiled
$C/tv_resnet18_infer.py channels_last channels_last
$C/nanogpt_compiled.py compile_reduce_overhead reduce_overhead
"
check_case() {  # prog fix variant: exit status 0 when gpuscope's gain matches the hand-applied one
  local prog=$1 fix=$2 variant=$3 name failed=0
  name=$(basename "$prog" .py)-$fix
  echo "=== $name ($(date +%T), GPU $CUDA_VISIBLE_DEVICES)"
  # by hand: the plain runs of the variant and of the program as written, interleaved, steady time per iteration
  for r in $(seq "$ROUNDS"); do
    python3 "$prog" --timing-out "$OUT/try/$name-hand-as_written-$r.json" >/dev/null || failed=1
    python3 "$prog" --variant "$variant" --timing-out "$OUT/try/$name-hand-$variant-$r.json" >/dev/null || failed=1
  done
  # by gpuscope: the same program, the fix switched on by the launcher
  python3 -m gpuscope try --fix "$fix" --rounds "$ROUNDS" --steps 60 --warmup 15 --json -- "$prog" \
    > "$OUT/try/$name-gpuscope.json" 2> "$OUT/try/$name-gpuscope.err" || { tail -3 "$OUT/try/$name-gpuscope.err"; failed=1; }
  python3 - "$OUT/try" "$name" "$variant" "$ROUNDS" "$TOLERANCE" <<'PY' || failed=1
import json, statistics, sys
d, name, variant, rounds, tol = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
def steady(v, r):
    return json.load(open(f"{d}/{name}-hand-{v}-{r}.json"))["steady_s_per_iteration"]
hand = statistics.median(1 - steady(variant, r) / steady("as_written", r) for r in range(1, rounds + 1))
g = json.load(open(f"{d}/{name}-gpuscope.json"))["fixes"][0]
m = (g.get("measured_gain") or {}).get("median")
ok = g["status"] == "measured" and m is not None and abs(m - hand) <= tol
print(f"{name}: by hand {hand:+.1%}; gpuscope try {g['status']}, {'-' if m is None else f'{m:+.1%}'} "
      f"(interval {g['measured_gain'] and g['measured_gain']['low']} to {g['measured_gain'] and g['measured_gain']['high']}); "
      f"estimate {g['estimated_gain']}; numbers {g['numerics'] and g['numerics']['agrees']}; dynamo {g['dynamo']}; "
      f"{'ok' if ok else 'MISMATCH'}")
json.dump({"case": name, "hand": hand, "gpuscope": m, "status": g["status"], "estimate": g["estimated_gain"],
           "ok": ok}, open(f"{d}/{name}-check.json", "w"))
sys.exit(0 if ok else 1)
PY
  return $failed
}

gpus=(${TRY_GPUS:-0})
lists=()
i=0
while read -r prog fix variant; do
  [ -z "$prog" ] && continue
  [[ -n "${TRY_ONLY:-}" && ! "$(basename "$prog" .py)-$fix" =~ $TRY_ONLY ]] && continue
  k=$(( i % ${#gpus[@]} )); i=$((i + 1))
  lists[$k]+="$prog $fix $variant;"
done <<< "$CASES"
pids=()
for k in "${!gpus[@]}"; do
  (
    bad=0
    IFS=';' read -ra mine <<< "${lists[$k]:-}"
    for c in "${mine[@]}"; do
      [ -z "$c" ] && continue
      CUDA_VISIBLE_DEVICES=${gpus[$k]} check_case $c || bad=1
    done
    exit $bad
  ) &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
echo "try_check: $([ $failed = 0 ] && echo PASS || echo FAIL)"
exit $failed
