#!/usr/bin/env bash
# The real-client suite on a GPU machine (tests/workloads/clients/): what profiling costs on each
# program (bench/real_cost.py) and whether the diagnosis names the fix that measures best
# (bench/diagnosis.py --suite clients). With several GPUs each part runs one worker per GPU.
#
#     OUT=/tmp/out bash tests/device/real_clients.sh cost        # ~9 minutes on 4 GPUs
#     OUT=/tmp/out bash tests/device/real_clients.sh diagnosis   # ~9 minutes on 4 GPUs
#     OUT=/tmp/out bash tests/device/real_clients.sh ablation    # the default's parts, fresh processes
#     OUT=/tmp/out bash tests/device/real_clients.sh where       # the same inside one process
#
# ablation: ABLATE (programs, one worker per GPU), ABLATE_MODES, ABLATE_ROUNDS, ABLATE_BUDGET_S.
# where: WHERE ("program:rounds:steps ..."), on the GPU WHERE_GPU (default the last), beside the rest.
#
# Needs: python3 with a CUDA build of torch and the client libraries (transformers, torchvision,
# lightning, jax, cupy, triton); cupti-python, nvtx, duckdb, msgspec, ijson as cp312 wheels in
# .whl/ where missing. PREVIOUS: the src folder of the previous version of gpuscope (cost's
# "previous" mode; default .prev/src where it exists). COST_ARGS, DIAG_ARGS: more arguments.
set -u
OUT=${OUT:-/tmp/gpuscope-device}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
GPUS=$(nvidia-smi -L | wc -l)
CORES=$(( $(nproc) / GPUS - 1 ))
PREVIOUS=${PREVIOUS:-$PWD/.prev/src}
SECTIONS=${*:-cost diagnosis}
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch, transformers, sys; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"

if has cost; then
  echo "=== cost ($(date +%T)), $GPUS GPU(s), $CORES cores each"
  prev=()
  [ -d "$PREVIOUS/gpuscope" ] && prev=(--previous "$PREVIOUS")
  python3 bench/real_cost.py --gpus "$GPUS" --cores-per-gpu "$CORES" "${prev[@]}" --scale 0.15 \
    --budget-s "${COST_BUDGET_S:-500}" --rounds 5 --out "$OUT/real_cost.json" --md "$OUT/real_cost.md" ${COST_ARGS:-}
fi

if has where; then
  echo "=== where ($(date +%T)) on GPU ${WHERE_GPU:-$((GPUS - 1))}"
  (
    for spec in ${WHERE:-hf_bert_infer:12:30 hf_gpt2_generate:5:2}; do
      IFS=: read -r name rounds steps <<< "$spec"
      CUDA_VISIBLE_DEVICES=${WHERE_GPU:-$((GPUS - 1))} timeout 300 python3 -m gpuscope profile --no-overhead-probe \
        -o "$OUT/where_$name" --force-overwrite python3 tests/device/where_cost.py --workload "client:$name" \
        --rounds "$rounds" --steps "$steps" --warmup 5 --out "$OUT/where_$name.json" > "$OUT/where_$name.log" 2>&1
      echo "where $name rc=$?"; grep -E "^client:" "$OUT/where_$name.log"; rm -f "$OUT/where_$name.gpuscope"
    done
  ) &
  WHERE_PID=$!
fi

if has ablation; then
  n=$(echo "${ABLATE:-hf_bert_infer,hf_gpt2_generate,jax_mlp}" | tr ',' '\n' | wc -l)
  echo "=== ablation ($(date +%T)) on $n GPU(s)"
  python3 bench/real_cost.py --gpus "$n" --cores-per-gpu "$CORES" --only "${ABLATE:-hf_bert_infer,hf_gpt2_generate,jax_mlp}" \
    --modes "${ABLATE_MODES:-untraced,floor,default,both-sites,no-sites,no-anchors,no-torch,no-samplers}" \
    --scale "${ABLATE_SCALE:-0.3}" --rounds "${ABLATE_ROUNDS:-3}" --budget-s "${ABLATE_BUDGET_S:-400}" \
    --out "$OUT/ablation.json" --md "$OUT/ablation.md"
fi
[ -n "${WHERE_PID:-}" ] && wait "$WHERE_PID"

if has diagnosis; then
  echo "=== diagnosis ($(date +%T)), $GPUS GPU(s)"
  for i in $(seq 1 "$GPUS"); do
    lo=$(( (i - 1) * (CORES + 1) )); hi=$(( lo + CORES - 1 ))
    CUDA_VISIBLE_DEVICES=$((i - 1)) timeout "${DIAG_TIMEOUT_S:-540}" taskset -c "$lo-$hi" \
      python3 bench/diagnosis.py --skip-old --suite clients --part "$i/$GPUS" --rounds 3 \
      --trace "${DIAG_TRACE:-cuda,nvtx,torch,torch-shapes,host,nvml,cpu}" --out "$OUT/diag_$i" ${DIAG_ARGS:-} > "$OUT/diag_$i.log" 2>&1 &
  done
  wait
  tail -n 30 "$OUT"/diag_*.log
  python3 bench/diagnosis.py --merge "$OUT"/diag_* --out "$OUT/diagnosis" || true
  # keep what comes back small: the reports as gzip fixtures, the rest of the work folders gone
  find "$OUT"/diag_* -name '*.gpuscope' -size -30M -exec gzip -f {} \;
  find "$OUT"/diag_* -name '*.gpuscope' -delete
fi
