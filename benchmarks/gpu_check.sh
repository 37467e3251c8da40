#!/usr/bin/env bash
# The GPU check, in one command on a lent GPU (sized for about 8 minutes on one H100/H200):
#   1. tests/test_gpu.py (pytest -m gpu): the CUDA kernels against exact attention on padded
#      batches, every measure group fast vs eager on the GPU, float64 GPU == CPU, verify,
#      bfloat16 vs float32;
#   2. the GPU benchmark tables: benchmarks/attention.py --gpu (a 1B-shaped Llama) and
#      benchmarks/ff.py, bfloat16, written to benchmarks/results/*-gpu.md, where
#      benchmarks/readme.py splices them into the README (run it after this).
# Everything it writes is also copied to $OUT when that is set (the device tool's folder).
# Usage: benchmarks/gpu_check.sh            (from the repository root, the venv built)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
"$PY" -c "import torch, sys; ok = torch.cuda.is_available(); print(torch.cuda.get_device_name(0) if ok else 'no CUDA'); sys.exit(0 if ok else 3)" || { echo "no GPU here: nothing to check"; exit 3; }
LOG=benchmarks/results/gpu_check.log  # not versioned: the tables are
mkdir -p benchmarks/results
: > "$LOG"
status=0
step() {  # step NAME SECONDS COMMAND...: runs, logs, keeps going after a failure
  local name=$1 limit=$2; shift 2
  echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s)" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee -a "$LOG"
step "tests (pytest -m gpu)" 180 "$PY" -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider
step "attention.py --gpu" 200 "$PY" benchmarks/attention.py --device cuda --dtype bfloat16 --gpu --reps 3 --memory-max 16384 --save
step "ff.py" 120 "$PY" benchmarks/ff.py --device cuda --dtype bfloat16 --reps 3 --memory-max 8192 --save
if [ -n "${OUT:-}" ]; then
  cp "$LOG" benchmarks/results/*-gpu.md "$OUT"/ 2>/dev/null || true
fi
echo "done: exit $status (then: python benchmarks/readme.py)" | tee -a "$LOG"
exit $status
