#!/usr/bin/env bash
# Issue #16's GPU rows in one call on a machine with a CUDA GPU and no network:
#
#     bash benchmarks/gpu.sh [OUT]      # OUT: where the logs and JSON go (default /tmp/xmcbench-gpu)
#
# 1. the GPU-only tests (pytest -m gpu);
# 2. `python -m benchmarks --only search_gpu`: exact top-100 on the GPU (bf16 candidates + float32
#    rescore vs the bare float32 matmul), 10k x 100k and 10k x 1M labels x 384-d;
# 3. `python -m benchmarks --only train_gpu`: one epoch of each supervised method at its paper's batch
#    and pool sizes, DistilBERT-shaped encoder (random weights), 100k labels, bf16; peak memory per step
#    next to `xmcbench plan`'s estimate;
#    then DEXML's hard-negative regime at batch 512 (its 1.3M recipe's 8192 split over 16 GPUs; 8192 on
#    one GPU does not fit);
# 4. `python -m benchmarks.profile_search_gpu`: where the 10k x 100k search's time goes (chunk sizes,
#    group widths, the result's copy to the host: as it was, as it is, through pinned memory);
# 5. `benchmarks/bench_activations.py`: a DistilBERT-shaped encoder's activations per token and layer
#    at 32-512 tokens, next to the plan's model (fitted on this step's H100 run: 42.5 h + 2 s bytes).
#
# Python packages the machine lacks can come as wheels in .whl/ (installed into /tmp/site), and the
# encoder's tokenizer as a folder in .gpu/tokenizer (a copy of MiniLM's: bert-base-uncased's vocabulary).
# Each step has its own time limit, so a slow one cannot take the others' results with it.
# GPU_STEPS picks steps for a short lease (default: all), e.g. GPU_STEPS="tests search train";
# GPU_TRAIN_METHODS the training rows' methods (default: the runner's list), e.g. "maclr,lmtx".
set -uo pipefail
out=${1:-${OUT:-/tmp/xmcbench-gpu}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=true
export XMCBENCH_HOME=${XMCBENCH_HOME:-/tmp/xmcbench-gpu-home}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
tokenizer=all-MiniLM-L6-v2
[ -d .gpu/tokenizer ] && tokenizer=$PWD/.gpu/tokenizer

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv 2>&1 | tee "$out/gpu.txt"
python3 -c "import torch, transformers, xmcbench; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$out/gpu.txt"

steps=" ${GPU_STEPS:-tests search profile_search train train_b512 activations} "
step() {  # name, limit in seconds, command...
    local name=$1 limit=$2
    shift 2
    [[ $steps == *" $name "* ]] || return 0
    local start=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s" | tee -a "$out/gpu.txt"
    tail -n 25 "$out/$name.log"
}

step tests "${GPU_TESTS_S:-60}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/search/test_exact.py tests/train/test_gradcache.py tests/train/test_autocast_and_rng.py tests/losses/test_loss_registry.py
step search "${GPU_SEARCH_S:-120}" python3 -m benchmarks --only search_gpu --repeat 2 --json "$out/search-gpu.json"
step profile_search "${GPU_PROFILE_S:-90}" python3 -m benchmarks.profile_search_gpu
shape=()
if [ -n "${GPU_TRAIN_METHODS:-}" ]; then
    shape=(--shape "$(python3 -c 'import json, sys
from benchmarks.runner import FULL
t = dict(FULL["train_gpu"], methods=sys.argv[1].split(","))
print(json.dumps({"train_gpu": t}))' "$GPU_TRAIN_METHODS")")
fi
step train "${GPU_TRAIN_S:-300}" python3 -m benchmarks --only train_gpu --tokenizer "$tokenizer" "${shape[@]}" \
    --json "$out/train-gpu.json"
step train_b512 "${GPU_B512_S:-90}" python3 benchmarks/bench_train.py --device cuda --encoder distilbert \
    --tokenizer "$tokenizer" --labels 100000 --train 2048 --batch 512 --epochs 1 --precision auto \
    --methods dexml_hard --method-timeout 80 --out "$out/train-gpu-b512.json"
step activations "${GPU_ACT_S:-60}" python3 benchmarks/bench_activations.py --device cuda --json "$out/activations-gpu.json"
cp /tmp/xmcbench-train-gpu-*.json "$out/" 2>/dev/null || true
