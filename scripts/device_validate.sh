#!/usr/bin/env bash
# On a lent GPU machine: the lab on every trap, the capture overhead, and a Hugging Face Trainer run.
# Usage (from the repo root, carrying .whl with the msgspec wheel): bash scripts/device_validate.sh OUT
set -u
OUT=${1:?output folder}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
WORK=/tmp/gd-validate; rm -rf "$WORK"; mkdir -p "$WORK"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > "$OUT/nvidia-smi.csv"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/versions.txt"

echo "== lab" ; date -u
timeout 420 python3 -m gpudoctor lab run --all --out "$WORK" --json > "$OUT/lab.json" 2> "$WORK/lab.err"
echo "lab rc=$?"; tail -3 "$WORK/lab.err"

if [ -z "${SKIP_OVERHEAD:-}" ]; then
  echo "== overhead"; date -u
  timeout 150 python3 benchmarks/bench_capture_overhead.py --steps 100 --rounds 5 > "$OUT/overhead.md" 2> "$WORK/overhead.err"
  echo "overhead rc=$?"; tail -2 "$WORK/overhead.err"
fi

echo "== demo"; date -u
(cd "$WORK" && timeout 120 python3 -m gpudoctor demo --width 100 > "$OUT/demo.txt" 2>&1; echo "demo rc=$?")

echo "== hf"; date -u
(cd "$WORK" && timeout 240 python3 -m gpudoctor run --skip 10 --steps 5 --stack --out "$WORK/hf" \
   "$OLDPWD/benchmarks/hf_trainer_example.py" > "$OUT/hf_report.txt" 2> "$WORK/hf.err"; echo "hf rc=$?")
tail -3 "$WORK/hf.err"

tar -czf "$OUT/validate.tar.gz" -C "$WORK" . 2>/dev/null
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
try:
    rows = json.load(open(f"{out}/lab.json"))
except Exception as exc:
    print("lab.json unreadable:", exc); rows = []
for r in rows:
    ratio = r.get("ratio")
    print(f"{r['trap']:22} {str(r['expected']):22} {str(r['top_finding']):22} rank={r['rank']} "
          f"pred={r['predicted_speedup'] or 0:.2f} meas={r['measured_speedup'] or 0:.2f} ratio={ratio} {r['verdict']} {r.get('error','')[:80]}")
import os
if os.path.exists(f"{out}/overhead.md"):
    print(open(f"{out}/overhead.md").read())
print(open(f"{out}/demo.txt").read()[-600:])
PY
