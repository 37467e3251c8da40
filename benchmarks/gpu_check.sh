#!/usr/bin/env bash
# The GPU check, in one command on a lent GPU (steps and limits: 9 minutes on one H100/H200):
#   1. tests/test_gpu.py (pytest -m gpu): the CUDA kernels against exact attention on padded
#      batches, every measure group fast vs eager on the GPU, float64 GPU == CPU, verify,
#      bfloat16 vs float32 on a random BERT-base and a 1B Llama (GQA);
#   2. the GPU benchmark tables, bfloat16, on random models of real shapes:
#      benchmarks/attention.py --gpu, benchmarks/ff.py --gpu and benchmarks/distance.py --gpu
#      (BERT-base, Llama-1b), and benchmarks/actor.py (a job's worker, every group, detail
#      sample, statistics on the GPU, against the bare forward; the result path's host CPU
#      per token beside it), written to benchmarks/results/*-gpu.md, where
#      benchmarks/readme.py splices them into the docs (run it after this).
# It needs what the lent machine's image has and nothing else: python3 with torch,
# transformers, numpy, pyarrow, click, pyyaml and pytest. mixscope runs from src/
# (PYTHONPATH below, no install); no Ray, DuckDB or packaged model is imported; the models
# are built from configs and the tokenizer from tests/data/wordpiece-uncased (no download).
# At most 8 files go to $OUT when it is set (the device tool's folder): the log, the tests'
# JUnit XML and the four tables.
#
# Usage, from the repository root or anywhere:
#   benchmarks/gpu_check.sh            on a GPU (exit 3, saying so, where there is no CUDA)
#   benchmarks/gpu_check.sh --dry-run  on any machine: every step on the CPU at its smallest
#                                      size, nothing saved (tests/test_gpu_check.py in CI)
# Exit status: 0 all steps passed, 1 a step failed (the others still ran), 2 usage, 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") DRY=0 ;;
    --dry-run) DRY=1 ;;
    *) echo "usage: benchmarks/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1
if [ "$DRY" -eq 0 ]; then
    "$PY" -c "import torch, sys; ok = torch.cuda.is_available(); print(torch.cuda.get_device_name(0) if ok else 'no CUDA'); sys.exit(0 if ok else 3)" ||
        { echo "no GPU here: nothing to check (--dry-run runs every step on the CPU)"; exit 3; }
fi
RESULTS=benchmarks/results
LOG=$RESULTS/gpu_check.log  # not versioned: the tables are
mkdir -p "$RESULTS"
: > "$LOG"
STAMP=$(mktemp)  # what this run wrote is newer: an older table never goes to $OUT
trap 'rm -f "$STAMP"' EXIT
status=0
step() {  # step NAME SECONDS COMMAND...: runs, logs, keeps going after a failure
    local name=$1 limit=$2; shift 2
    echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s)" | tee -a "$LOG"
    timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc" | tee -a "$LOG"
    [ "$rc" -eq 0 ] || status=1
}
"$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], '· torch', torch.__version__, '· transformers', transformers.__version__)" | tee -a "$LOG"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$LOG"
sleep 1  # file times have a resolution: the stamp is older than anything written after it
TESTS=(-m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --junitxml="$RESULTS/gpu-tests.xml")
if [ "$DRY" -eq 1 ]; then
    # the same steps on the CPU: small shapes, one repetition, nothing written for the README
    step "tests on the CPU (pytest -m gpu)" 300 env MIXSCOPE_GPU_TEST_DEVICE=cpu "$PY" "${TESTS[@]}"
    step "attention.py --gpu --quick (CPU)" 300 "$PY" benchmarks/attention.py --device cpu --gpu --quick --reps 1 --memory-max 512
    step "ff.py --gpu --quick (CPU)" 300 "$PY" benchmarks/ff.py --device cpu --gpu --quick --reps 1 --memory-max 512
    step "distance.py --gpu --quick (CPU)" 300 "$PY" benchmarks/distance.py --device cpu --gpu --quick --reps 1 --no-memory
    step "actor.py --quick (CPU)" 300 "$PY" benchmarks/actor.py --device cpu --quick --in-flight 2,4
else
    step "tests (pytest -m gpu)" 120 "$PY" "${TESTS[@]}"
    step "attention.py --gpu" 150 "$PY" benchmarks/attention.py --device cuda --dtype bfloat16 --gpu --reps 3 --memory-max 16384 --save
    step "ff.py --gpu" 90 "$PY" benchmarks/ff.py --device cuda --dtype bfloat16 --gpu --reps 3 --memory-max 8192 --save
    step "distance.py --gpu" 60 "$PY" benchmarks/distance.py --device cuda --dtype bfloat16 --gpu --reps 3 --no-memory --save
    step "actor.py" 120 "$PY" benchmarks/actor.py --device cuda --dtype bfloat16 --in-flight 2,4 --reps 2 --save
fi
if [ -n "${OUT:-}" ]; then
    for f in "$LOG" "$RESULTS/gpu-tests.xml" "$RESULTS"/attention-gpu.md "$RESULTS"/ff-gpu.md "$RESULTS"/distance-gpu.md "$RESULTS"/actor-gpu.md; do
        [ "$f" -nt "$STAMP" ] && cp "$f" "$OUT"/
    done
fi
if [ "$DRY" -eq 1 ]; then
    echo "dry run done: exit $status (every step ran on the CPU; on a GPU: benchmarks/gpu_check.sh)" | tee -a "$LOG"
else
    echo "done: exit $status (then: python benchmarks/readme.py)" | tee -a "$LOG"
fi
exit $status
