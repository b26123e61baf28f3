#!/usr/bin/env bash
# Issues 43 and 61's device check, prepared for one lent H100 or H200 (its stages' time limits add to 475 s, about
# 8 minutes of device time; what each stage takes is not yet measured; each has its own limit so a slow one cannot
# eat the next, and decode_ab.py prints each round as it ends). Run from the repository root with the project's venv:
#
#     bash perf/gpu_check.sh            # logs under $OUT (the device tool's folder) or perf/gpu_check_out/
#     FULL=1 bash perf/gpu_check.sh     # also the rest of `pytest -m gpu` (~2 more minutes)
#
# What it measures, all bf16 at Qwen3-0.6B's shape (random weights), 128 rows:
#   1. token equality eager vs CUDA graph on the GPU, fp32, the graphs of growing windows and compacted batches
#      included (tests/trainer/test_gpu.py -k graph/moe);
#   2. ms per decode step at 64 and 512 new tokens, in one process per length: gspo's lean sampler with the
#      growing cache (eager) and the static cache (graphs, growing windows, compaction), transformers' generate with
#      its dynamic cache (HF eager) and with cache_implementation="static" (HF static, compiled) -- perf/decode_ab.py;
#   3. at 2,048 new tokens, every row to the end: the static cache's windows against its whole bucket (issue 43's
#      decoder), the positions each read; then rows ending after ~128 tokens (every 128th token id an eos) over up
#      to 1,024: compaction against every row decoding to the last (the HF arms would take minutes here);
#   4. gspo against TRL per rollout batch (TRL at its default and with cache_implementation="static", bf16=True, when
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

stage gpu_graph_tests 65 python -m pytest -q -n 0 -m gpu tests/trainer/test_gpu.py -k "graph or moe_decode" -p no:cacheprovider
stage decode_64 75 python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --rows 128 \
    --max-new-tokens 64 --rounds 2 --threads 8 --hf --arms dynamic,static
stage decode_512 130 python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --rows 128 \
    --max-new-tokens 512 --rounds 1 --threads 8 --hf --arms dynamic,static
stage decode_2048 60 python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --rows 128 \
    --max-new-tokens 2048 --rounds 1 --threads 8 --arms static,static-bucket
stage decode_1024_ends 35 python perf/decode_ab.py --device cuda --shape qwen3-0.6b --dtype bfloat16 --rows 128 \
    --max-new-tokens 1024 --end-every 128 --rounds 1 --threads 8 --arms static,static-bucket
arms=gspo
python -c "import trl" 2>/dev/null && arms=gspo,trl-static,trl
stage trl_vs_gspo_64 110 python perf/trl_vs_gspo.py --device cuda --model qwen3-0.6b-random --precision bf16 \
    --algos gspo --arms "$arms" --repeats 1 --batches 1 --warmup 1 --threads 8 --max-new-tokens 64
if [ "${FULL:-0}" = 1 ]; then
    stage gpu_tests_rest 150 python -m pytest -q -n 0 -m gpu tests/trainer/test_gpu.py -k "not graph and not moe_decode" \
        -p no:cacheprovider
fi
echo "total $(( $(date +%s) - started )) s" | tee -a "$out/summary.txt"
