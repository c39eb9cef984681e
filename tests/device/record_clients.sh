#!/usr/bin/env bash
# Record client programs as written under gpuscope (the recording bench/diagnosis.py makes), one per
# GPU at a time, for the diagnosis fixtures:
#   OUT=/tmp/out bash tests/device/record_clients.sh tv_resnet50_train:30 sdpa_explicit_mask:100 ...
# (NAME:ITERATIONS). Reports land gzipped under $OUT/clients/.
set -u
OUT=${OUT:-/tmp/gpuscope-device}
mkdir -p "$OUT/clients"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
GPUS=$(nvidia-smi -L | wc -l)
TRACE=${TRACE:-cuda,nvtx,torch,torch-shapes,host,nvml,cpu}
i=0
for spec in "$@"; do
  name=${spec%%:*}; it=${spec#*:}
  gpu=$(( i % GPUS )); i=$((i + 1))
  ( CUDA_VISIBLE_DEVICES=$gpu timeout 300 python3 -m gpuscope profile -t "$TRACE" -o "$OUT/clients/client_$name" \
      --force-overwrite python3 tests/workloads/clients/$name.py --iterations "$it" > "$OUT/clients/$name.log" 2>&1
    echo "$name rc=$?"; gzip -9 -f "$OUT/clients/client_$name.gpuscope" ) &
  if (( i % GPUS == 0 )); then wait; fi
done
wait
ls -la "$OUT/clients"
