#!/usr/bin/env bash
# On a lent machine with 2+ GPUs: gpudoctor bench with the NCCL curves (NVLS stays as the machine sets it).
set -u
OUT=${1:?output folder}
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/gd-cache
env | grep -E '^NCCL_|^TORCH_SYMM|^NVSHMEM' | sort > "$OUT/env.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
timeout 540 python3 -m gpudoctor bench --collectives --json > "$OUT/bench_x2.json" 2> "$OUT/bench_x2.err"; echo "rc=$?"
tail -3 "$OUT/bench_x2.err"
python3 - "$OUT" <<'PY'
import json, sys
d = json.load(open(f"{sys.argv[1]}/bench_x2.json"))
for m in d["measurements"]:
    if m["probe"].startswith(("p2p", "nccl", "hbm.copy", "gemm.bf16")):
        print(m["probe"], round(m["value"] / 1e9, 1), "GB/s" if m["unit"] == "B/s" else "GFLOP/s", m["detail"])
c = d.get("collectives", {})
print("error:", c.get("error"))
for op, rows in (c.get("curves") or {}).items():
    print(op, [(r["bytes"], round(r["busbw_Bps"] / 1e9, 1)) for r in rows])
PY
cat "$OUT/env.txt"
