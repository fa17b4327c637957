#!/usr/bin/env bash
# The Triton target's device check (issue 20): conformance on the GPU and gdv's artifacts timed
# beside torch eager (CUDA) and torch.compile; results under $OUT (gpu_check.md, .json,
# descriptor.json, log.txt). Run from the repository root:
#     OUT=/some/folder bash benchmarks/gpu_device_check.sh          (on the GPU machine)
#     OUT=/tmp/gc bash benchmarks/gpu_device_check.sh --dry-run     (anywhere: CPU interpreter)
# z3-solver and lark come from the wheels in .whl/ when PYTHONPATH does not already hold them.
set -u
OUT="${OUT:-/tmp/gdv-gpu-check}"
mkdir -p "$OUT"
if ! python3 -c "import z3, lark" 2>/dev/null; then
  pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! python3 -c "import gdv.ir, gdv.backends" 2>/dev/null; then
  # gdv's root folders map to gdv.* (pyproject package-dir): a folder of links makes them
  # importable without installing
  FARM=/tmp/gdvpath; rm -rf "$FARM"; mkdir -p "$FARM/gdv"
  for f in gdv/*; do ln -s "$PWD/$f" "$FARM/gdv/"; done
  for d in grammar ir backends validate passes frontends evidence; do ln -s "$PWD/$d" "$FARM/gdv/$d"; done
  export PYTHONPATH="$FARM${PYTHONPATH:+:$PYTHONPATH}"
fi
export TRITON_DEFAULT_FP_FUSION=0
# GDV_GPU_SECONDS: the wall-clock limit of the whole check (the script's budget is 30 s less)
LIMIT="${GDV_GPU_SECONDS:-290}"
timeout "$LIMIT" python3 benchmarks/gpu_check.py --out "$OUT" --budget "$((LIMIT - 30))" "$@" 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
