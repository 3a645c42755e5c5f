#!/usr/bin/env bash
# On a lent GPU machine: gpudoctor bench full and --quick (timed), its HTML page, and analyze
# using the saved machine profile. Usage: bash scripts/device_bench.sh OUT   (carry .whl)
set -u
OUT=${1:?output folder}
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/gd-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv > "$OUT/nvidia-smi.csv"
start=$(date +%s%N); python3 -m gpudoctor bench --json --html "$OUT/bench.html" > "$OUT/bench.json" 2> "$OUT/bench.err"; rc=$?
end=$(date +%s%N); echo "full bench rc=$rc ms=$(( (end - start) / 1000000 ))" | tee "$OUT/timings.txt"
start=$(date +%s%N); python3 -m gpudoctor bench --quick --no-save > "$OUT/bench_quick.txt" 2>&1; rc=$?
end=$(date +%s%N); echo "quick bench rc=$rc ms=$(( (end - start) / 1000000 ))" | tee -a "$OUT/timings.txt"
python3 -m gpudoctor analyze tests/data/fp32_matmul/trace.json.gz --width 100 > "$OUT/analyze_measured.txt" 2>&1
head -8 "$OUT/analyze_measured.txt"
cat "$OUT/bench_quick.txt"
tail -3 "$OUT/bench.err"
