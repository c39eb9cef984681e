#!/usr/bin/env bash
# Jobs on every GPU of one host (four where lent), profiled as users start them, and checked:
#   bash tests/device/four_gpus.sh [SECTION...]
#   (sections: env fixtures truth tree ops planted imbalance gpubound cost; default all)
# fixtures: small reports of FSDP, 2 x 2 data + tensor parallel, a straggler and an imbalance;
# truth:    the same jobs with their CUDA-event timings (tests/device/dist4_truth.py), a torch.profiler
#           capture of each beside it, and an all-reduce forced onto NCCL's tree algorithm;
# gpubound: the uneven MLP split made costly (32 x 1024 tokens per rank: the matmuls are most of the
#           step), profiled at 8:8 and 15:1, its cost measured untraced, and what analyze says of it;
# cost:     untraced, gpuscope's default and torch.profiler, fresh jobs interleaved, while BUDGET_S lasts.
# Everything lands under $OUT (reports packed into one archive: the device returns few files).
set -u
OUT=${OUT:-/tmp/gpuscope-device}
SRC=${GPUSCOPE_SRC:-$PWD/src}
BUDGET_S=${BUDGET_S:-540}
T0=$(date +%s)
mkdir -p "$OUT"
W=/tmp/four; rm -rf "$W"; mkdir -p "$W/reports" "$W/timing" "$W/kineto" "$W/logs"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$SRC
else
  export PYTHONPATH=$SRC
fi
export PYTHONUNBUFFERED=1
PY=python3
N=$(nvidia-smi -L | wc -l)
JOB="$PY -m torch.distributed.run --nproc_per_node=$N tests/device/workloads/dist4.py"
SECTIONS=${*:-env fixtures truth tree ops planted imbalance gpubound cost}
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
step() { echo; echo "=== $* ($(date +%T), $(left) s left)"; }
gs() { timeout 200 $PY -m gpuscope "$@"; }

if has env; then
  step env
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvidia-smi topo -m | head -8
  $PY -c "import torch, sys; print(sys.version.split()[0], 'torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
fi

if has fixtures; then
  for spec in "fsdp:--mode fsdp" "tp:--mode tp" "tp_slow_rank:--mode tp --slow-rank 2" \
              "tp_big_rank:--mode tp --big-rank 1" "fsdp_slow_rank:--mode fsdp --slow-rank 3"; do
    name=${spec%%:*}; args=${spec#*:}
    step "fixture dist4_$name: $args, 12 steps, default collectors"
    gs profile -o "$W/reports/dist4_$name" --force-overwrite $JOB $args --steps 12 --no-truth \
      > "$W/logs/$name.log" 2>&1; echo "rc=$?"; tail -3 "$W/logs/$name.log"
  done
fi

if has truth; then
  for mode in fsdp tp; do
    step "truth $mode: profiled (no overhead probe: the timed calls after the loop stay recorded)"
    gs profile --no-overhead-probe -o "$W/reports/truth_$mode" --force-overwrite $JOB --mode $mode --steps 30 \
      --timing-dir "$W/timing/truth_$mode" > "$W/logs/truth_$mode.log" 2>&1; echo "rc=$?"
    $PY tests/device/dist4_truth.py "$W/reports/truth_$mode.gpuscope" "$W/timing/truth_$mode" \
      --json "$OUT/truth_$mode.json" > /dev/null 2> "$W/logs/truth_check_$mode.err"; echo "check rc=$?"
    step "truth $mode: torch.profiler's capture of the same job"
    timeout 200 $JOB --mode $mode --steps 30 --no-truth --torch-profiler "$W/kineto/$mode" \
      --timing-dir "$W/timing/kineto_$mode" > "$W/logs/kineto_$mode.log" 2>&1; echo "rc=$?"
    $PY tests/device/dist4_truth.py "$W/reports/truth_$mode.gpuscope" "$W/timing/truth_$mode" \
      --kineto "$W/kineto/$mode" --json "$OUT/truth_$mode.json" > /dev/null 2>> "$W/logs/truth_check_$mode.err"; echo "check rc=$?"
  done
fi

if has tree; then
  step "truth: all-reduces forced onto NCCL's tree algorithm, simple protocol (does the kernel's name follow?)"
  NCCL_ALGO=Tree NCCL_PROTO=Simple NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING gs profile --no-overhead-probe \
    -o "$W/reports/truth_tree" --force-overwrite $JOB --mode tp --steps 8 --truth-all-reduce-only \
    --timing-dir "$W/timing/truth_tree" > "$W/logs/truth_tree.log" 2>&1; echo "rc=$?"
  $PY tests/device/dist4_truth.py "$W/reports/truth_tree.gpuscope" "$W/timing/truth_tree" \
    --json "$OUT/truth_tree.json" > /dev/null 2> "$W/logs/truth_check_tree.err"; echo "check rc=$?"
fi

if has ops; then
  step "truth tp with every PyTorch operator recorded (the collectives' bytes and groups after the loop too)"
  gs profile -t cuda,nvtx,torch,torch-ops,host --no-overhead-probe -o "$W/reports/truth_ops_tp" --force-overwrite \
    $JOB --mode tp --steps 12 --timing-dir "$W/timing/truth_ops_tp" > "$W/logs/truth_ops_tp.log" 2>&1; echo "rc=$?"
  $PY tests/device/dist4_truth.py "$W/reports/truth_ops_tp.gpuscope" "$W/timing/truth_ops_tp" \
    --json "$OUT/truth_ops_tp.json" > /dev/null 2> "$W/logs/truth_check_ops.err"; echo "check rc=$?"
fi

means() { cat "$1"/rank*.json 2>/dev/null | sed 's/}{/}\n{/g' | $PY -c 'import sys, json; d=[json.loads(l) for l in sys.stdin if l.strip()]; print(" ".join("%.2f" % x["mean_step_ms"] for x in sorted(d, key=lambda x: x["rank"])))'; }

if has planted; then
  # what removing each planted problem saves, untraced: the jobs with and without it, alternating
  for r in 1 2; do
    for spec in "fsdp:--mode fsdp" "fsdp_slow_rank:--mode fsdp --slow-rank 3" "tp:--mode tp" \
                "tp_slow_rank:--mode tp --slow-rank 2" "tp_big_rank:--mode tp --big-rank 1"; do
      name=${spec%%:*}; args=${spec#*:}; tag=planted_${name}_$r
      timeout 200 $JOB $args --steps 30 --no-truth --timing-dir "$W/timing/$tag" > "$W/logs/$tag.log" 2>&1
      echo "$tag rc=$? $(means "$W/timing/$tag")"
    done
  done
fi

if has imbalance; then
  # a strong imbalance between tensor-parallel shards: the MLP split 15:1 in each pair against 8:8
  step "fixture dist4_tp_split_15_1, and the split's cost untraced"
  gs profile -o "$W/reports/dist4_tp_split_15_1" --force-overwrite $JOB --mode tp --mlp-split 15:1 --steps 12 --no-truth \
    > "$W/logs/tp_split_15_1.log" 2>&1; echo "rc=$?"
  for r in 1 2; do
    for split in 8:8 15:1; do
      tag=split_${split/:/_}_$r
      timeout 200 $JOB --mode tp --mlp-split $split --steps 30 --no-truth --timing-dir "$W/timing/$tag" > "$W/logs/$tag.log" 2>&1
      echo "$tag rc=$? $(means "$W/timing/$tag")"
    done
  done
fi

if has gpubound; then
  # the imbalance where the GPU is the bottleneck: the larger shard's matmuls are what its peer waits for
  HEAVY="--mode tp --batch 32 --seq 1024"
  for split in 8:8 15:1; do
    name=tp_heavy_split_${split/:/_}
    step "fixture dist4_$name: $HEAVY --mlp-split $split, 12 steps, default collectors"
    gs profile -o "$W/reports/dist4_$name" --force-overwrite $JOB $HEAVY --mlp-split $split --steps 12 --no-truth \
      > "$W/logs/$name.log" 2>&1; echo "rc=$?"; tail -3 "$W/logs/$name.log"
    gs analyze --format json "$W/reports/dist4_$name.gpuscope" > "$W/logs/analyze_$name.json" 2> "$W/logs/analyze_$name.err"
    echo "analyze rc=$?"
    $PY -c 'import json, sys; d = json.load(open(sys.argv[1]))
for f in d["findings"]:
    if f["rule"] in ("straggler", "load_imbalance"): print(f["rule"], f["title"], "%.2f ms" % (f["saving_ns"] / 1e6))' \
      "$W/logs/analyze_$name.json" 2>&1 | head -5
  done
  step "the split's cost untraced, GPU-bound (per-rank mean step ms)"
  for r in 1 2; do
    for split in 8:8 15:1; do
      tag=heavy_split_${split/:/_}_$r
      timeout 200 $JOB $HEAVY --mlp-split $split --steps 30 --no-truth --timing-dir "$W/timing/$tag" > "$W/logs/$tag.log" 2>&1
      echo "$tag rc=$? $(means "$W/timing/$tag")"
    done
  done
fi

if has cost; then
  # one round: each mode of each job once, in rotating order; a round starts only with time for it
  r=0
  while (( $(left) > ${ROUND_S:-170} )); do
    r=$((r + 1))
    for mode in fsdp tp; do
      for m in untraced gpuscope torchprof; do
        tag=cost_${mode}_${m}_$r
        case $m in
          untraced) timeout 200 $JOB --mode $mode --steps 60 --no-truth --timing-dir "$W/timing/$tag" > "$W/logs/$tag.log" 2>&1 ;;
          gpuscope) gs profile -o "$W/reports/$tag" --force-overwrite $JOB --mode $mode --steps 60 --no-truth \
                      --timing-dir "$W/timing/$tag" > "$W/logs/$tag.log" 2>&1 ;;
          torchprof) timeout 200 $JOB --mode $mode --steps 60 --no-truth --torch-profiler "$W/kineto/$tag" \
                      --timing-dir "$W/timing/$tag" > "$W/logs/$tag.log" 2>&1 ;;
        esac
        echo "$tag rc=$? $(means "$W/timing/$tag")"
        rm -rf "$W/kineto/$tag"
      done
    done
  done
  # the cost runs' reports are not kept (their steps are in the timings)
  rm -f "$W"/reports/cost_*.gpuscope
fi

step "pack"
ls -la "$W/reports"
tar -czf "$OUT/four_gpus.tar.gz" -C "$W" reports timing logs
ls -la "$OUT"
