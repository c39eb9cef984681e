#!/usr/bin/env bash
# Everything gpuscope checks on a GPU machine, in one go: records the test fixtures, checks kernel
# times against CUDA events and torch.profiler, checks crash safety, looks at other frameworks, and
# times the overhead. Results go to $OUT (default /tmp/gpuscope-device), fixtures to $OUT/fixtures.
#
# Needs: python3 with torch (CUDA); cupti-python, nvtx and duckdb installed or carried as wheels in
# .whl/ (../shared/device/fetch-wheels.sh plus duckdb). Run from the repository root:
#     bash tests/device/run_all.sh [sections...]
# sections: env fixtures nvtx layers events torchprof crash frameworks sync graphs torchops roofline probe capture diagnosis programs programs-trace overhead-probe gaps power drift nccl-shared ablation-pinned multi-gpu multi-gpu-truth multi-gpu-compare overhead-where gemm-gaps shapes shapes-programs hang anchors where where-ab floor launchcost spin-exit rangecost rawcheck memory memory-check memory-cupti memory-cost overhead
# PROGRAMS_ARGS: more arguments of bench/diagnosis.py for the programs section ("--part 1/2", "--only bmm_loop")
set -u
OUT=${OUT:-/tmp/gpuscope-device}
mkdir -p "$OUT/fixtures" "$OUT/work"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
export PYTHONUNBUFFERED=1
PY=python3
WL=tests/device/workloads
W=$OUT/work
SECTIONS=${*:-env fixtures nvtx layers events torchprof crash frameworks sync graphs torchops roofline capture diagnosis programs probe anchors rangecost rawcheck memory memory-check memory-cupti memory-cost overhead}
gs() { timeout 150 $PY -m gpuscope "$@"; }
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
step() { echo; echo "=== $* ($(date +%T))"; }

if has env; then
  step env
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  $PY -c "import sys, torch, duckdb, numpy; from cupti import cupti; print(sys.version.split()[0], 'torch', torch.__version__, 'duckdb', duckdb.__version__, 'numpy', numpy.__version__, 'cupti-python', __import__('importlib.metadata').metadata.version('cupti-python'))"
fi

if has fixtures; then
  step "fixture: MLP training, every CUDA record kind incl. API calls"
  gs profile -t cuda,cuda-api,nvtx,torch -o "$OUT/fixtures/mlp_api" --force-overwrite $WL/mlp.py --steps 3 --warmup 1 --nvtx
  step "fixture: MLP training, default collectors"
  gs profile -o "$OUT/fixtures/mlp_default" --force-overwrite $WL/mlp.py --steps 3 --warmup 1 --nvtx
  gs stats "$OUT/fixtures/mlp_api.gpuscope" > "$OUT/stats_mlp_api.txt"
  gs stats -f json "$OUT/fixtures/mlp_api.gpuscope" > "$OUT/stats_mlp_api.json"
  gs export "$OUT/fixtures/mlp_api.gpuscope" -o "$W/mlp_api.trace.json" --force-overwrite
  head -c 3000 "$OUT/stats_mlp_api.txt"
fi

if has nvtx; then
  step "NVTX from several sources"
  gs profile -o "$OUT/fixtures/nvtx_sources" --force-overwrite $WL/nvtx_sources.py --out "$OUT/nvtx_findings.json"
  $PY -c "import gpuscope, sys; r = gpuscope.load(sys.argv[1]); print(r.ranges()[['name','domain','kind','tid','duration_ns']].to_string())" "$OUT/fixtures/nvtx_sources.gpuscope"
fi

if has layers; then
  step "layers: small GPT eager (all collectors) and compiled (default), and under torch.profiler"
  gs profile -t cuda,cuda-api,nvtx,torch,torch-backward -o "$OUT/fixtures/gpt_eager" --force-overwrite $WL/transformer.py --steps 5 --warmup 3
  gs profile -t cuda,nvtx,torch,torch-backward,host,nvml -o "$OUT/fixtures/gpt_compiled" --force-overwrite $WL/transformer.py --compile blocks --steps 5 --warmup 3
  $PY $WL/transformer.py --steps 5 --warmup 3 --torch-profiler "$W/gpt_torch.json" && gzip -c "$W/gpt_torch.json" > "$OUT/gpt_torch.json.gz"
  $PY tests/device/check.py layers "$OUT/fixtures/gpt_eager.gpuscope" "$OUT/gpt_torch.json.gz" > "$OUT/check_layers.json"; echo "layers rc=$?"
  gs stats -r layer_sum -r step_sum "$OUT/fixtures/gpt_compiled.gpuscope" > "$OUT/stats_gpt_compiled.txt"; head -40 "$OUT/stats_gpt_compiled.txt"
fi

if has events; then
  step "check: kernel durations vs CUDA events"
  gs profile -o "$W/events" --force-overwrite $WL/event_truth.py --out "$W/events_truth.json"
  $PY tests/device/check.py events "$W/events.gpuscope" "$W/events_truth.json" > "$OUT/check_events.json"; echo "events rc=$?"
  cp "$W/events.gpuscope" "$OUT/fixtures/event_regions.gpuscope"; cp "$W/events_truth.json" "$OUT/fixtures/event_regions.truth.json"
fi

if has torchprof; then
  step "check: per-kernel totals vs torch.profiler"
  gs profile -o "$W/tp" --force-overwrite $WL/mlp.py --steps 50 --warmup 5
  $PY $WL/mlp.py --steps 50 --warmup 5 --torch-profiler "$W/tp_torch.json"
  $PY tests/device/check.py torchprof "$W/tp.gpuscope" "$W/tp_torch.json" > "$OUT/check_torchprof.json"; echo "torchprof rc=$?"
fi

if has crash; then
  for mode in exit kill raise term; do
    step "check: crash mode $mode"
    gs profile -o "$W/crash_$mode" --force-overwrite $WL/crash.py $mode --marker "$W/crash_$mode.marker"
    echo "gpuscope rc=$?"
    $PY tests/device/check.py crash "$W/crash_$mode.gpuscope" "$W/crash_$mode.marker" > "$OUT/check_crash_$mode.json"; echo "crash $mode rc=$?"
  done
  cp "$W/crash_kill.gpuscope" "$OUT/fixtures/crash_kill.gpuscope"
fi

if has frameworks; then
  step "frameworks: CuPy, Triton, Numba, JAX"
  gs profile -o "$W/fw" --force-overwrite $WL/frameworks.py
  gs stats -r cuda_gpu_kern_sum "$W/fw.gpuscope" > "$OUT/stats_frameworks.txt"; head -40 "$OUT/stats_frameworks.txt"
fi

if has sync; then
  step "sync sites: .item() and nonzero per step"
  gs profile -o "$OUT/fixtures/sync_loop" --force-overwrite $WL/sync_loop.py --steps 20 --warmup 3 --lines-out "$OUT/fixtures/sync_loop.lines.json"
  $PY tests/device/check.py sync "$OUT/fixtures/sync_loop.gpuscope" "$OUT/fixtures/sync_loop.lines.json" > "$OUT/check_sync.json"; echo "sync rc=$?"
  gs stats -r sync_sum "$OUT/fixtures/sync_loop.gpuscope" | head -20
fi

if has graphs; then
  step "CUDA graphs: replays attributed to the range around them (kernel nodes; then whole graphs)"
  gs profile -o "$OUT/fixtures/cuda_graph" --force-overwrite $WL/cuda_graph.py --steps 20 --warmup 2 --facts-out "$W/graph_facts.json"
  $PY tests/device/check.py graphs "$OUT/fixtures/cuda_graph.gpuscope" "$W/graph_facts.json" > "$OUT/check_graphs.json"; echo "graphs rc=$?"
  gs profile -t cuda,cuda-api,nvtx -o "$W/cuda_graph_api" --force-overwrite $WL/cuda_graph.py --steps 20 --warmup 2 --facts-out "$W/graph_facts.json"
  $PY tests/device/check.py graphs "$W/cuda_graph_api.gpuscope" "$W/graph_facts.json" > "$OUT/check_graphs_api.json"; echo "graphs api rc=$?"
  gs profile -t cuda,cuda-graph,nvtx -o "$OUT/fixtures/cuda_graph_whole" --force-overwrite $WL/cuda_graph.py --steps 20 --warmup 2
  $PY -c "import gpuscope, sys; r = gpuscope.load(sys.argv[1]); print('graph launches', r.count('graph_launch'), 'kernels', r.count('kernel'), 'in graphs', r.sql('SELECT count(*) FROM kernel WHERE graph_id <> 0')[0][0])" "$OUT/fixtures/cuda_graph_whole.gpuscope"
fi

if has torchops; then
  step "PyTorch operators: every kernel in a step inside an operator; cost per operator"
  gs profile -t cuda,nvtx,torch,torch-ops -o "$OUT/fixtures/mlp_ops" --force-overwrite $WL/mlp.py --steps 30 --warmup 5 --timing-out "$W/ops_with.json"
  gs profile -t cuda,nvtx,torch -o "$W/mlp_noops" --force-overwrite $WL/mlp.py --steps 30 --warmup 5 --timing-out "$W/ops_without.json"
  $PY tests/device/check_torch_ops.py "$OUT/fixtures/mlp_ops.gpuscope" --timing-with "$W/ops_with.json" --timing-without "$W/ops_without.json" > "$OUT/check_torch_ops.json"; echo "torch_ops rc=$?"
  gs profile -t cuda,cuda-api,nvtx,torch,torch-ops -o "$W/gpt_ops" --force-overwrite $WL/transformer.py --steps 5 --warmup 3
  $PY tests/device/check_torch_ops.py "$W/gpt_ops.gpuscope" > "$OUT/check_torch_ops_gpt.json"; echo "torch_ops gpt rc=$?"
  gs stats -r op_sum "$OUT/fixtures/mlp_ops.gpuscope" | head -30
fi

if has roofline; then
  step "roofline: ceilings against a CUDA-event-timed copy and a large matmul; work-model FLOPs against ncu"
  $PY tests/device/roofline_check.py "$OUT/roofline"; echo "roofline rc=$?"
fi

if has probe; then
  step "overhead parts, inside one process (CUPTI kinds, callbacks, PyTorch hooks toggled between blocks)"
  $PY tests/device/overhead_probe.py --rounds ${PROBE_ROUNDS:-7} --out "$OUT/overhead_probe.json" | grep -v '^ '
fi

if has capture; then
  step "capture ranges: --steps 10-20, cudaProfilerApi, torch.cuda.nvtx, gpuscope.profile(), against a full run"
  # reports stay in a temporary folder; $OUT/capture gets check_capture.json (printed here) and the
  # fixture capture_steps.gpuscope.gz + capture_steps.facts.json (copy both to tests/fixtures/)
  $PY tests/device/check_capture_range.py --out "$OUT/capture"; echo "capture rc=$?"
fi

if has memory; then
  step "memory and CPU of the target while kernel records leave it: untraced; raw buffers; raw without latency timestamps; cupti-python objects"
  N=${MEMORY_KERNELS:-3000000}
  $PY $WL/many_kernels.py --kernels $N --out "$OUT/memory_untraced.json" | tail -1
  ARGS=("$OUT/memory_untraced.json")
  for v in raw raw_nolatency objects; do
    case $v in
      raw) E=() ;;
      raw_nolatency) E=(GPUSCOPE_LATENCY_TIMESTAMPS=0) ;;
      objects) E=(GPUSCOPE_RAW_BUFFERS=0) ;;
    esac
    env "${E[@]}" timeout 400 $PY -m gpuscope profile -t cuda -o "$W/many_$v" --force-overwrite $WL/many_kernels.py --kernels $N --out "$OUT/memory_$v.json" | tail -1
    ARGS+=("$OUT/memory_$v.json:$W/many_$v.gpuscope")
  done
  $PY tests/device/memory_summary.py "${ARGS[@]}" > "$OUT/memory_summary.txt"; tail -6 "$OUT/memory_summary.txt"
fi

if has memory-check; then
  step "--trace memory against the truth: peak vs max_memory_allocated, a planted 2 GiB activation, an OOM program"
  # everything in one tar: $OUT/memory_check.tar (check_memory.json, the reports, logs and truths)
  rm -rf "$W/memory_check" && mkdir -p "$W/memory_check"
  $PY tests/device/check_memory.py --out "$W/memory_check" > "$W/memory_check/check_memory.json"; echo "memory-check rc=$?"
  head -c 3000 "$W/memory_check/check_memory.json"
  rm -f "$W"/memory_check/cost.gpuscope; gzip -f "$W"/memory_check/*.gpuscope
  tar cf "$OUT/memory_check.tar" -C "$W" memory_check
fi

if has memory-cupti; then
  step "CUPTI's memory records (-t cuda,memory) against libcuda allocations of known address and size"
  $PY tests/device/check_memory_cupti.py --out "$OUT/memory_cupti" > /dev/null; echo "memory-cupti rc=$?"
  head -c 2000 "$OUT/memory_cupti/check_memory_cupti.json"
fi

if has memory-cost; then
  step "the cost of --trace memory on the launch-bound MLP: default against default+memory, interleaved (about 5 minutes)"
  $PY bench/memory_overhead.py --rounds 4 --out "$OUT/memory_overhead.json" --md "$OUT/memory_overhead.md"
fi

if has anchors; then
  step "launch anchors against CUPTI's queued times: the innermost range of every kernel"
  $PY tests/device/check_anchors.py --out "$OUT/anchors.json"; echo "anchors rc=$?"
fi

if has where; then
  step "where the default's cost sits: settings switched inside one process (tests/device/where_cost.py)"
  SPY=$(command -v py-spy || echo /tmp/site/bin/py-spy)
  WHERE="taskset -c 4-11 timeout 400"
  $WHERE $PY tests/device/where_cost.py --workload mlp --rounds 8 --out "$OUT/where_mlp_untraced.json"
  $WHERE $PY -m gpuscope profile --no-overhead-probe -o "$W/where_mlp" --force-overwrite tests/device/where_cost.py --workload mlp --out "$OUT/where_mlp_default.json" --spy "$SPY"
  $WHERE $PY -m gpuscope profile --no-overhead-probe -t torch -o "$W/where_mlp_torch" --force-overwrite tests/device/where_cost.py --workload mlp --out "$OUT/where_mlp_torch.json"
  $WHERE $PY -m gpuscope profile --no-overhead-probe -t cuda -o "$W/where_mlp_cuda" --force-overwrite tests/device/where_cost.py --workload mlp --out "$OUT/where_mlp_cuda.json"
  $WHERE $PY tests/device/where_cost.py --workload gpt --rounds 8 --out "$OUT/where_gpt_untraced.json"
  $WHERE $PY -m gpuscope profile --no-overhead-probe -o "$W/where_gpt" --force-overwrite tests/device/where_cost.py --workload gpt --rounds 12 --out "$OUT/where_gpt_default.json"
fi

if has floor; then
  step "CUPTI's own cost inside one untraced process, attached and detached block by block (tests/device/cupti_floor.py)"
  for wl in ${FLOOR_WORKLOADS:-launch mlp gpt gemm gpt-compiled}; do
    taskset -c 4-11 timeout 300 $PY tests/device/cupti_floor.py --workload $wl --rounds ${FLOOR_ROUNDS:-16} --out "$OUT/floor_$wl.json"
    echo "floor $wl rc=$?"
  done
fi

if has launchcost; then
  step "CUPTI's cost per launch as each profiled process measures it at its end (capture/cupti/launch_cost.py)"
  for t in cuda cuda,cuda-api; do
    for r in 1 2 3; do
      taskset -c 4-11 timeout 200 $PY -m gpuscope profile --no-overhead-probe -t $t -o "$W/lc_$r" --force-overwrite $WL/mlp.py --steps 40 > "$W/lc_$r.log" 2>&1
      echo "trace $t round $r rc=$? $(grep -o 'ns_per_launch=[0-9]*' "$W/lc_$r.log" | head -1)"
      $PY -c "import gpuscope, sys; r = gpuscope.load(sys.argv[1]); print(r.sql(\"SELECT pid, detail FROM collector WHERE name = 'cupti'\")); print(r.sql(\"SELECT message FROM diagnostic WHERE message LIKE '%per kernel launch%'\")); print('kernels', r.count('kernel'), 'of the measurement', r.sql(\"SELECT count(*) FROM kernel k JOIN kernel_config c ON c.id = k.config_id JOIN string s ON s.id = c.name_id WHERE s.value LIKE 'gpuscope%'\"))" "$W/lc_$r.gpuscope"
      grep "Collection overhead" "$W/lc_$r.log"
    done
  done
fi

if has spin-exit; then
  step "a kernel still spinning when the program ends: the run's end against untraced (CUPTI's last flush waits for the kernel; the end-of-run launch measurement adds nothing to that)"
  for m in untraced gpuscope; do
    t0=$(date +%s%N)
    if [ $m = gpuscope ]; then timeout 120 $PY -m gpuscope profile -o "$W/spin" --force-overwrite $WL/spin_at_exit.py --seconds 20 > "$W/spin.log" 2>&1
    else timeout 120 $PY $WL/spin_at_exit.py --seconds 20 > /dev/null 2>&1; fi
    echo "$m rc=$? $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
  $PY -c "import gpuscope, sys; r = gpuscope.load(sys.argv[1]); print(r.sql(\"SELECT message FROM diagnostic WHERE message LIKE '%per kernel launch%'\")); print('kernels', r.count('kernel'))" "$W/spin.gpuscope"
fi

if has where-ab; then
  step "the default against the source tree in base-src/ (an earlier version, if there), fresh processes interleaved"
  if [ -d base-src/src ]; then
    OVERHEAD_BASE_PYTHONPATH=/tmp/site:$PWD/base-src/src taskset -c 4-11 $PY bench/overhead.py --workloads ${OVERHEAD_WORKLOADS:-mlp,gpt} --modes untraced,gpuscope,gpuscope@base --rounds ${OVERHEAD_ROUNDS:-20} --budget-s ${OVERHEAD_BUDGET_S:-300} --out "$OUT/overhead_ab.json"
  else
    echo "no base-src/src: nothing to compare"
  fi
fi

if has rangecost; then
  step "cost of one recorded range around a kernel: untraced; with launch anchors (made in C; through a Python callback, GPUSCOPE_NATIVE_ANCHORS=0); without (GPUSCOPE_ANCHORS=0)"
  for v in untraced on py 0; do
    for r in 1 2; do
      if [ $v = untraced ]; then $PY $WL/range_cost.py --pairs 100000 --out "$OUT/rangecost_${v}_$r.json" | tail -1
      else GPUSCOPE_ANCHORS=$([ $v = 0 ] && echo 0) GPUSCOPE_NATIVE_ANCHORS=$([ $v = py ] && echo 0) timeout 300 $PY -m gpuscope profile -t cuda,nvtx -o "$W/rc_$v" --force-overwrite $WL/range_cost.py --pairs 100000 --out "$OUT/rangecost_${v}_$r.json" > /dev/null 2>&1
        echo "$v: $(cat "$OUT/rangecost_${v}_$r.json") $($PY -c "import gpuscope, sys; r = gpuscope.load(sys.argv[1]); print(r.sql(\"SELECT detail FROM collector WHERE name = 'cupti'\")[0][0], [m for (m,) in r.sql('SELECT message FROM diagnostic')])" "$W/rc_$v.gpuscope")"; fi
    done
  done
fi

if has rawcheck; then
  step "CUPTI buffers read in raw: every record against CUPTI's iterator; same records as cupti-python's objects"
  $PY tests/device/check_raw_buffers.py --out "$OUT/raw_check.json" | tail -30; echo "rawcheck rc=${PIPESTATUS[0]}"
fi

if has diagnosis; then
  step "diagnosis: planted bottlenecks (tests/workloads), planted vs fixed, top finding vs measured gain"
  $PY bench/diagnosis.py --out "$OUT/diagnosis" --skip-new; echo "diagnosis rc=$?"
  for r in "$OUT"/diagnosis/reports/*.gpuscope; do
    [ -e "$r" ] && gzip -c "$r" > "$OUT/fixtures/diagnosis_$(basename "$r").gz"
  done
fi

if has programs; then
  step "programs: ordinary scripts without step marks (tests/workloads), every candidate fix timed in one process, the program as written diagnosed"
  # the reports leave as $OUT/fixtures/program_NAME.gpuscope.gz (bench/diagnosis.py --rediagnose $OUT/programs finds
  # them there); the rows as $OUT/programs.json and the tables as $OUT/programs.md
  $PY bench/diagnosis.py --out "$OUT/programs" --skip-old ${PROGRAMS_ARGS:-}; echo "programs rc=$?"
  for r in "$OUT"/programs/reports/*.gpuscope; do
    [ -e "$r" ] && gzip -c "$r" > "$OUT/fixtures/program_$(basename "$r").gz" && rm "$r"
  done
  cp "$OUT/programs/diagnosis.json" "$OUT/programs.json"; cp "$OUT/programs/diagnosis.md" "$OUT/programs.md"
fi

if has programs-trace; then
  step "programs: reports only (each as written under the default collectors and Python samples), packed in one file"
  # PROGRAMS_ONLY: these programs instead of all; PROGRAMS_MEASURE: programs whose fixes are timed again (--measure)
  mkdir -p "$OUT/programs_trace"
  for n in ${PROGRAMS_ONLY:-$($PY -c "import sys; sys.path.insert(0, 'bench'); import diagnosis; print(' '.join(diagnosis.PROGRAMS))")}; do
    timeout 200 $PY -m gpuscope profile -t "$($PY -c "import sys; sys.path.insert(0, 'bench'); import diagnosis; print(diagnosis.TRACE)")" \
      -o "$OUT/programs_trace/$n" --force-overwrite tests/workloads/$n.py > "$OUT/programs_trace/$n.log" 2>&1
    echo "$n rc=$? $(tail -c 300 "$OUT/programs_trace/$n.log" | tail -1)"
  done
  for n in ${PROGRAMS_MEASURE:-}; do
    timeout 200 $PY tests/workloads/$n.py --measure --rounds 5 --timing-out "$OUT/programs_trace/$n.measure.json" \
      > "$OUT/programs_trace/$n.measure.log" 2>&1; tail -6 "$OUT/programs_trace/$n.measure.log"
  done
  gzip -f "$OUT"/programs_trace/*.gpuscope
  tar cf "$OUT/programs_trace.tar" -C "$OUT" programs_trace && rm -rf "$OUT/programs_trace"
fi

if has overhead-probe; then
  step "overhead probe: each program's steps untraced (optimizer-step marks, no profiler) against the probe's steps with collection off, alternating; the reports diagnosed"
  # PROBE_PROGRAMS: the programs (default: those with an optimizer); PROBE_ROUNDS: rounds (default 2);
  # PROBE_TRACE: collectors (default: bench/diagnosis.py's TRACE, as the program fixtures were recorded)
  mkdir -p "$OUT/oprobe"
  TR=${PROBE_TRACE:-$($PY -c "import sys; sys.path.insert(0, 'bench'); import diagnosis; print(diagnosis.TRACE)")}
  for round in $(seq 1 ${PROBE_ROUNDS:-2}); do
    for n in ${PROBE_PROGRAMS:-conv_train_bf16 sync_not_bottleneck mlp_adam dataloader_and_sync compiled_mlp adam_foreach_off mlp_item_nonzero}; do
      timeout 200 $PY tests/device/probe_truth.py tests/workloads/$n.py > "$OUT/oprobe/${n}_untraced_$round.json" 2> "$OUT/oprobe/${n}_untraced_$round.log"
      timeout 200 $PY -m gpuscope profile -t "$TR" -o "$OUT/oprobe/${n}_$round" --force-overwrite tests/workloads/$n.py > "$OUT/oprobe/${n}_$round.log" 2>&1
      echo "$n round $round rc=$? $(date +%T)"
    done
  done
  $PY tests/device/check_probe.py "$OUT/oprobe" > "$OUT/oprobe_check.json"; echo "check rc=$?"
  $PY -c "import json,sys; [print(r['program'], r['round'], 'untraced', r.get('untraced_median_ns'), 'off', r.get('off_median_ns'), 'on', r.get('on_median_ns'), 'off/untraced', r.get('off_vs_untraced'), [(f['rule'], f['share']) for f in r.get('findings', [])[:2]]) for r in json.load(open(sys.argv[1]))]" "$OUT/oprobe_check.json"
  gzip -f "$OUT"/oprobe/*.gpuscope
  tar cf "$OUT/oprobe.tar" -C "$OUT" oprobe && rm -rf "$OUT/oprobe"
fi

if has shapes; then
  step "operator samples (torch-shapes) against every operator, on the GPT"
  gs profile -t cuda,nvtx,torch,host,nvml,torch-shapes -o $W/gpt_shapes --force-overwrite $WL/transformer.py --steps 30 --warmup 3 --timing-out $W/shapes_with.json > /dev/null 2>&1
  gs profile -t cuda,nvtx,torch,host,nvml -o $W/gpt_noshapes --force-overwrite $WL/transformer.py --steps 30 --warmup 3 --timing-out $W/shapes_without.json > /dev/null 2>&1
  gs profile -t cuda,cuda-api,nvtx,torch,torch-ops,host,nvml -o $W/gpt_allops --force-overwrite $WL/transformer.py --steps 30 --warmup 3 > /dev/null 2>&1
  $PY tests/device/check_torch_shapes.py $W/gpt_shapes.gpuscope $W/gpt_allops.gpuscope --timing-with $W/shapes_with.json --timing-without $W/shapes_without.json > "$OUT/shapes_check.json"; echo "shapes rc=$?"
  head -c 3000 "$OUT/shapes_check.json"
fi

if has shapes-programs; then
  step "operator samples (torch-shapes) on the validation programs: does it run, and what does it cost (traced with and without it, alternating)"
  mkdir -p "$OUT/shapes_programs"
  TR=$($PY -c "import sys; sys.path.insert(0, 'bench'); import diagnosis; print(diagnosis.TRACE)")
  for round in 1 2; do
    for n in ${SHAPES_PROGRAMS:-conv_train_bf16 dataloader_and_sync infer_cnn_small compiled_mlp mlp_item_nonzero}; do
      for t in "$TR" "$TR,torch-shapes"; do
        tag=$([ "$t" = "$TR" ] && echo plain || echo shapes)
        timeout 200 $PY -m gpuscope profile -t "$t" -o "$OUT/shapes_programs/${n}_${tag}_$round" --force-overwrite \
          tests/workloads/$n.py > "$OUT/shapes_programs/${n}_${tag}_$round.log" 2>&1
        echo "$n $tag round $round rc=$? $(tail -c 200 "$OUT/shapes_programs/${n}_${tag}_$round.log" | tail -1)"
      done
    done
  done
  gzip -f "$OUT"/shapes_programs/*.gpuscope
  tar cf "$OUT/shapes_programs.tar" -C "$OUT" shapes_programs && rm -rf "$OUT/shapes_programs"
fi

if has hang; then
  step "does a compiled program hang under operator samples? (compiled_mlp, alternating collector sets; py-spy dumps of any run past 100 s)"
  mkdir -p "$OUT/hang"
  SPY=$(command -v py-spy || echo /tmp/site/bin/py-spy)
  i=0
  for t in ${HANG_TRACES:-cuda,nvtx,torch,torch-shapes,host,nvml,cpu cuda,nvtx,torch,torch-shapes,host,nvml cuda,nvtx,torch,host,nvml,cpu cuda,nvtx,torch,torch-shapes,host,nvml,cpu cuda,nvtx,torch,torch-shapes,host,nvml,cpu}; do
    i=$((i+1))
    ( $PY -m gpuscope profile -t "$t" -o "$W/hang_$i" --force-overwrite tests/workloads/compiled_mlp.py > "$OUT/hang/run_$i.log" 2>&1; echo "rc=$?" >> "$OUT/hang/run_$i.log" ) &
    runner=$!
    for s in $(seq 1 100); do kill -0 $runner 2>/dev/null || break; sleep 1; done
    if kill -0 $runner 2>/dev/null; then
      echo "run $i ($t): still running after 100 s; dumping"
      for pid in $(pgrep -f "compiled_mlp.py"); do
        echo "== pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline | head -c 200)" >> "$OUT/hang/dump_$i.txt"
        timeout 30 $SPY dump --pid $pid --native >> "$OUT/hang/dump_$i.txt" 2>&1
        timeout 30 $SPY dump --pid $pid --locals >> "$OUT/hang/dump_${i}_locals.txt" 2>&1
      done
      pkill -KILL -f "compiled_mlp.py"; sleep 2
    else
      echo "run $i ($t): $(tail -1 "$OUT/hang/run_$i.log") in ${s} s"
    fi
    wait $runner 2>/dev/null
  done
  tar cf "$OUT/hang.tar" -C "$OUT" hang && rm -rf "$OUT/hang"
fi

if has power; then
  step "power: GPU-bound programs recorded with NVML's power limit and power-cap reason, then diagnosed"
  mkdir -p "$OUT/power"
  TR=$($PY -c "import sys; sys.path.insert(0, 'bench'); import diagnosis; print(diagnosis.TRACE)")
  # POWER_PROGRAMS: "name:iterations ..." (enough iterations for NVML's power reading, a 1 s average, to settle)
  for spec in ${POWER_PROGRAMS:-sync_not_bottleneck:300 big_gemms_bf16:200 conv_train_bf16:300}; do
    n=${spec%%:*}; it=${spec##*:}
    gs profile -t "$TR" -o "$OUT/power/$n" --force-overwrite tests/workloads/$n.py --iterations $it > "$OUT/power/$n.log" 2>&1
    echo "$n rc=$? $(date +%T)"
    gs analyze "$OUT/power/$n.gpuscope" > "$OUT/power/$n.analyze.txt" 2>&1
    gs analyze -f json "$OUT/power/$n.gpuscope" > "$OUT/power/$n.analyze.json" 2>&1
    sed -n '/Findings/,/^ 3 /p' "$OUT/power/$n.analyze.txt" | head -30
  done
fi

if has gaps; then
  step "gaps: fixes that remove the GPU's idle time, timed interleaved in one process, with NVML clocks and power per window"
  mkdir -p "$OUT/gaps"
  # GAP_PROGRAMS: only these programs (default: all below)
  gap() { n=$1; shift; [[ -n ${GAP_PROGRAMS:-} && " $GAP_PROGRAMS " != *" $n "* ]] && return; timeout 150 $PY tests/device/gap_truth.py tests/workloads/$n.py "$@" > "$OUT/gaps/$n.$2.json" 2> "$OUT/gaps/$n.$2.log"; echo "$n $* rc=$? $(date +%T)"; }
  gap sync_not_bottleneck as_written no_item --rounds 20 --iterations 40
  gap conv_train_bf16 as_written cuda_graph --rounds 20 --iterations 30
  gap mlp_item_nonzero as_written no_syncs cuda_graph cuda_graph_no_syncs --rounds 12 --iterations 200
fi

if has drift; then
  step "drift: the untraced MLP in fresh processes, free and pinned to four cores, alternating"
  mkdir -p "$OUT/drift"
  for i in 1 2 3 4 5 6; do
    $PY $WL/mlp.py --steps 300 --warmup 30 --timing-out "$OUT/drift/free_$i.json" > /dev/null 2>&1
    taskset -c 4-7 $PY $WL/mlp.py --steps 300 --warmup 30 --timing-out "$OUT/drift/pinned_$i.json" > /dev/null 2>&1
  done
  $PY -c "import json, glob, statistics as s
for k in ('free', 'pinned'):
    v = [json.load(open(f))['mean_step_s'] * 1e3 for f in sorted(glob.glob('$OUT/drift/' + k + '_*.json'))]
    print(k, ' '.join(f'{x:.3f}' for x in v), 'ms; spread', f'{(max(v) - min(v)) / s.median(v):.1%}')"
fi

if has nccl-shared; then
  step "NCCL: two ranks on one GPU (plain, then under gpuscope, then with a slow rank)"
  timeout 90 $PY -m torch.distributed.run --nproc_per_node=2 $WL/ddp_nccl.py --steps 40 > "$OUT/nccl_plain.log" 2>&1
  echo "plain rc=$?"; tail -5 "$OUT/nccl_plain.log"
  if grep -q '"world": 2' "$OUT/nccl_plain.log"; then
    gs profile -o "$OUT/fixtures/ddp_nccl_shared" --force-overwrite $PY -m torch.distributed.run --nproc_per_node=2 $WL/ddp_nccl.py --steps 40 > "$OUT/nccl_gs.log" 2>&1
    echo "profiled rc=$?"; tail -5 "$OUT/nccl_gs.log"
    gs profile -o "$OUT/fixtures/ddp_nccl_slow" --force-overwrite $PY -m torch.distributed.run --nproc_per_node=2 $WL/ddp_nccl.py --steps 40 --slow-rank 1 > "$OUT/nccl_slow.log" 2>&1
    echo "slow rc=$?"
    gs stats -r rank_sum -r collective_sum "$OUT/fixtures/ddp_nccl_shared.gpuscope" > "$OUT/nccl_stats.txt" 2>&1; head -40 "$OUT/nccl_stats.txt"
    gs analyze "$OUT/fixtures/ddp_nccl_slow.gpuscope" > "$OUT/nccl_analyze_slow.txt" 2>&1; head -40 "$OUT/nccl_analyze_slow.txt"
  fi
fi

if has ablation-pinned; then
  step "collectors one by one on the launch-bound MLP, pinned to eight cores (ABLATION_MODES, ABLATION_ROUNDS)"
  taskset -c 4-11 $PY bench/overhead.py --workloads mlp --rounds ${ABLATION_ROUNDS:-5} \
    --modes ${ABLATION_MODES:-untraced,ab-kernels,ab-+anchors,ab-+torch-ranges,ab-+host-nvml,ab-+torch-shapes=default} \
    --out "$OUT/ablation_pinned.json" --md "$OUT/ablation_pinned.md"
fi

if has multi-gpu; then
  step "multi-GPU: NCCL DDP and FSDP jobs on every GPU, plain and under gpuscope (a straggler, an imbalance)"
  N=$(nvidia-smi -L | wc -l); M=$OUT/multi; mkdir -p "$M"
  TR="$PY -m torch.distributed.run --nproc_per_node=$N $WL/ddp_nccl.py --steps 60"
  for r in 1 2; do  # untraced and traced, alternating: the cost of profiling the job
    timeout 120 $TR --timing-dir "$M/plain_$r" > "$M/plain_$r.log" 2>&1; echo "plain $r rc=$?"
    gs profile -o "$M/ddp_$r" --force-overwrite $TR --timing-dir "$M/traced_$r" > "$M/ddp_$r.log" 2>&1; echo "traced $r rc=$?"
  done
  gs profile -o "$M/ddp_slow" --force-overwrite $TR --slow-rank 1 --timing-dir "$M/slow" > "$M/ddp_slow.log" 2>&1; echo "slow rc=$?"
  gs profile -o "$M/ddp_big" --force-overwrite $TR --big-rank 0 --timing-dir "$M/big" > "$M/ddp_big.log" 2>&1; echo "big rc=$?"
  gs profile -o "$M/fsdp" --force-overwrite $TR --fsdp --timing-dir "$M/fsdp_t" > "$M/fsdp.log" 2>&1; echo "fsdp rc=$?"
  for n in ddp_1 ddp_slow ddp_big fsdp; do
    gs stats -r rank_sum -r collective_sum -r cuda_gpu_kern_sum "$M/$n.gpuscope" > "$M/$n.stats.txt" 2>&1
    gs analyze "$M/$n.gpuscope" > "$M/$n.analyze.txt" 2>&1
  done
  head -30 "$M/ddp_1.stats.txt"; sed -n '/Findings/,/^ 2 /p' "$M/ddp_slow.analyze.txt" | head -25; sed -n '/Findings/,/^ 2 /p' "$M/ddp_big.analyze.txt" | head -20
  cat "$M"/plain_1/*.json "$M"/traced_1/*.json
fi

if has multi-gpu-truth; then
  step "multi-GPU: the DDP job untraced and profiled (no overhead probe, so the timed all-reduces after the loop are recorded), alternating"
  N=$(nvidia-smi -L | wc -l); M=$OUT/multi; mkdir -p "$M"
  TR="$PY -m torch.distributed.run --nproc_per_node=$N $WL/ddp_nccl.py --steps 60"
  for r in 1 2 3; do
    timeout 120 $TR --timing-dir "$M/tplain_$r" > "$M/tplain_$r.log" 2>&1; echo "plain $r rc=$?"
    gs profile --no-overhead-probe -o "$M/truth_$r" --force-overwrite $TR --timing-dir "$M/ttraced_$r" > "$M/truth_$r.log" 2>&1; echo "traced $r rc=$?"
  done
fi

if has overhead-where; then
  step "where the default's cost sits: module ranges with and without launch anchors, per-step times kept (pinned)"
  taskset -c 4-11 $PY bench/overhead.py --workloads ${WHERE_WORKLOADS:-mlp} --rounds ${WHERE_ROUNDS:-5} \
    --modes ${WHERE_MODES:-untraced,ab-+anchors,ab-+torch-ranges,ab-+torch-ranges-noanchors,gpuscope,default-noanchors} \
    --out "$OUT/where_${WHERE_WORKLOADS:-mlp}.json" --md "$OUT/where_${WHERE_WORKLOADS:-mlp}.md"
fi

if has gemm-gaps; then
  step "GEMM windows timed with CUDA events, untraced and profiled (one GPU): does kernel tracing widen the gaps between kernels"
  G=$OUT/gemmgaps; mkdir -p "$G"
  TR1="$PY -m torch.distributed.run --nproc_per_node=1 $WL/ddp_nccl.py --steps 10"
  for r in 1 2; do
    timeout 120 $TR1 --timing-dir "$G/plain_$r" > "$G/plain_$r.log" 2>&1; echo "plain $r rc=$?"
    gs profile --no-overhead-probe -o "$G/gs_$r" --force-overwrite $TR1 --timing-dir "$G/gs_t_$r" > "$G/gs_$r.log" 2>&1; echo "gpuscope $r rc=$?"
  done
  grep -h '^{' "$G"/plain_*.log "$G"/gs_*.log | cut -c1-400
  for r in 1 2; do $PY tests/device/multi_gpu_truth.py "$G/gs_$r.gpuscope" "$G/gs_t_$r" --json "$G/truth_$r.json" > /dev/null; done
fi

if has multi-gpu-compare; then
  step "multi-GPU: the DDP job untraced, under gpuscope and under torch.profiler, rotating; GEMM windows and all-reduces against CUDA events; FSDP with a straggler"
  N=$(nvidia-smi -L | wc -l); M=$OUT/multi2; mkdir -p "$M"
  TR="$PY -m torch.distributed.run --nproc_per_node=$N $WL/ddp_nccl.py"
  plain() { timeout 150 $TR --steps 300 --timing-dir "$M/plain_$1" > "$M/plain_$1.log" 2>&1; echo "plain $1 rc=$?"; }
  gsrun() { gs profile --no-overhead-probe -o "$M/gs_$1" --force-overwrite $TR --steps 300 --timing-dir "$M/gs_t_$1" > "$M/gs_$1.log" 2>&1; echo "gpuscope $1 rc=$?"; }
  tprun() { timeout 150 $TR --steps 300 --torch-profiler "$M/tp_$1" --timing-dir "$M/tp_t_$1" > "$M/tp_$1.log" 2>&1; echo "torch.profiler $1 rc=$?"; }
  plain 1; gsrun 1; tprun 1
  gsrun 2; tprun 2; plain 2
  tprun 3; plain 3; gsrun 3
  for r in 1 2 3; do $PY tests/device/multi_gpu_truth.py "$M/gs_$r.gpuscope" "$M/gs_t_$r" --json "$M/truth_$r.json" > /dev/null || echo "truth $r failed"; done
  $PY - "$M" <<'PYEOF'
import json, pathlib, statistics, sys
m = pathlib.Path(sys.argv[1])
def step(d):
    f = sorted((m / d).glob("rank*.json"))
    return statistics.mean(json.loads(x.read_text())["mean_step_ms"] for x in f) if f else float("nan")
for r in (1, 2, 3):
    p, g, t = step(f"plain_{r}"), step(f"gs_t_{r}"), step(f"tp_t_{r}")
    print(f"round {r}: untraced {p:.3f} ms, gpuscope {g:.3f} ms ({g/p:.3f}x), torch.profiler {t:.3f} ms ({t/p:.3f}x)")
for r in (1, 2, 3):
    d = json.loads((m / f"truth_{r}.json").read_text())
    for k in d["ranks"]:
        w = k["windows"]
        print(r, "rank", k["rank"], "kernels", [x["kernels"] for x in w], "sum/event", [round(x["sum_over_event"], 4) for x in w],
              "span/event", [round(x["span_over_event"], 4) for x in w])
        print("   all-reduce kernel", [round(x, 3) for x in k["all_reduce_kernel_ms"]], "event", [round(x, 3) for x in k["all_reduce_event_ms"]])
PYEOF
  for rk in 0 1; do gs import "$M/tp_1/rank$rk.json" -o "$M/tp_1_rank$rk" --force-overwrite > "$M/import_$rk.log" 2>&1; echo "import rank$rk rc=$?"; done
  gs profile -o "$M/fsdp_slow" --force-overwrite $TR --steps 60 --fsdp --slow-rank 1 --timing-dir "$M/fsdp_slow_t" > "$M/fsdp_slow.log" 2>&1; echo "fsdp slow rc=$?"
  gs analyze "$M/fsdp_slow.gpuscope" > "$M/fsdp_slow.analyze.txt" 2>&1
  gs analyze "$M/gs_1.gpuscope" > "$M/gs_1.analyze.txt" 2>&1
  gs stats -r rank_sum -r collective_sum "$M/gs_1.gpuscope" > "$M/gs_1.stats.txt" 2>&1
  sed -n '/Findings/,/^ 3 /p' "$M/fsdp_slow.analyze.txt" | head -30
  ls -la "$M"
fi

if has overhead; then
  step "overhead"
  $PY bench/overhead.py --workloads ${OVERHEAD_WORKLOADS:-mlp,gemm,gpt} --rounds ${OVERHEAD_ROUNDS:-4} --out "$OUT/overhead.json"
fi
step done
