#!/usr/bin/env bash
# tools/measure-step trains the tiny one-GPU scenario for a few steps on the CPU
# and `trainsim calibrate compare` reads its output: the plumbing, end to end.
# Skipped (exit 77) when no python3 on this machine imports torch.
# usage: measure_step_cpu.sh TRAINSIM SOURCE_DIR
set -euo pipefail
trainsim=$1
src=$2
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c "import torch" 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [[ -z $python ]]; then
  echo "skipped: no python3 with PyTorch"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scenario="$src/tests/data/measure/tiny-llama-1gpu.json"
"$python" "$src/tools/measure-step" "$scenario" --device cpu --steps 2 -o "$work/measured.json"
"$python" - "$work/measured.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["kind"] == "step_measurement", m["kind"]
cats = m["categories_s"]
assert all(cats[k] > 0 for k in ("gemm", "attention", "elementwise", "optimizer")), cats
# The profiled operators account for most of a step, and not more than it.
assert 0.3 * m["iteration_s"] < sum(cats.values()) < 1.2 * m["iteration_s"], (cats, m["iteration_s"])
PY
out=$("$trainsim" calibrate compare "$work/measured.json" "$scenario")
echo "$out"
for row in gemm attention elementwise optimizer iteration; do
  grep -qE "^$row +[0-9.e+-]+ +[0-9.e+-]+ +[0-9.]+$" <<<"$out" || { echo "no $row row"; exit 1; }
done
