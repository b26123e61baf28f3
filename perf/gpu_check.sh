#!/usr/bin/env bash
# Issue 43's device check, prepared for one lent H100 or H200 (about 7.5 minutes of device time; each stage has its
# own time limit so a slow one cannot eat the next). Run from the repository root with the project's venv:
#
#     bash perf/gpu_check.sh            # logs under $OUT (the device tool's folder) or perf/gpu_check_out/
#     FULL=1 bash perf/gpu_check.sh     # also the rest of `pytest -m gpu` (~2 more minutes)
#
# What it measures, all bf16 at Qwen3-0.6B's shape (random weights), 128 rows:
#   1. token equality eager vs CUDA graph on the GPU, fp32 (tests/trainer/test_gpu.py -k graph/moe);
#   2. ms per decode step at 64 and 512 new tokens, in one process per length: gspo's lean sampler with the
#      growing cache (eager) and the static cache (graph), transformers' generate with its dynamic cache (HF eager)
#      and with cache_implementation="static" (HF static, compiled) -- perf/decode_ab.py;
#   3. gspo against TRL per rollout batch (TRL at its default and with cache_implementation="static", bf16=True, when
#      trl is installed), with the update's MFU and the weight-read floor -- perf/trl_vs_gspo.py, 64 tokens.
set -u
out="${OUT:-perf/gpu_check_out}"
mkdir -p "$out"
started=$(date +%s)
stage() {  # stage NAME SECONDS COMMAND...: run with a time limit, log to $out/NAME.log, say how it ended
    local name=$1 limit=$2
    shift 2
    local t0=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s (limit $limit s; $(( $(date +%s) - started )) s so far)" | tee -a "$out/summary.txt"
    tail -n 25 "$out/$name.log" | tee -a "$out/summary.txt"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  python -c "import trl; print('trl', trl.__version__)" 2>/dev/null || echo "trl not installed: the TRL arms are skipped"
  uptime; } | tee "$out/summary.txt"

stage gpu_graph_tests 75 python -m pytest -q -n 0 -m gpu tests/trainer/test_gpu.py -k "graph or moe_decode" -p no:cacheprovider
stage decode_64 90 python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --rows 128 \
    --max-new-tokens 64 --rounds 3 --threads 8 --hf
stage decode_512 150 python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --rows 128 \
    --max-new-tokens 512 --rounds 1 --threads 8 --hf
arms=gspo
python -c "import trl" 2>/dev/null && arms=gspo,trl-static,trl
stage trl_vs_gspo_64 150 python perf/trl_vs_gspo.py --device cuda --model qwen3-0.6b-random --precision bf16 \
    --algos gspo --arms "$arms" --repeats 1 --batches 2 --warmup 1 --threads 8 --max-new-tokens 64
if [ "${FULL:-0}" = 1 ]; then
    stage gpu_tests_rest 150 python -m pytest -q -n 0 -m gpu tests/trainer/test_gpu.py -k "not graph and not moe_decode" \
        -p no:cacheprovider
fi
echo "total $(( $(date +%s) - started )) s" | tee -a "$out/summary.txt"
