#!/usr/bin/env bash
# tandem-bench-collectives --json on 2 ranks (gloo, through tandem_test_spawn): every
# row carries size, count, time_us, algbw, busbw, wrong (0 with --check), in_place and
# raw, and the raw rows are the engine's.
#   bench_json.sh SPAWN BENCH
set -euo pipefail
SPAWN="$1" BENCH="$2"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
"$SPAWN" -n 2 -- "$BENCH" --backend gloo --op allreduce -b 64 -e 4K -f 8 -n 2 -w 1 --check --raw \
  --json "$OUT/rows.json" >/dev/null
python3 - "$OUT/rows.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
sizes = [64, 512, 4096]
assert d["backend"] == "gloo" and d["world_size"] == 2 and d["op"] == "allreduce", d
for raw in (False, True):
    for in_place in (False, True):
        got = [r for r in rows if r["raw"] == raw and r["in_place"] == in_place]
        assert [r["size"] for r in got] == sizes, (raw, in_place, got)
for r in rows:
    assert set(r) >= {"size", "count", "time_us", "algbw", "busbw", "wrong", "raw", "in_place", "path"}, r
    assert r["count"] * 4 == r["size"] and r["wrong"] == 0 and r["time_us"] > 0, r
    assert abs(r["algbw"] - r["size"] / r["time_us"] / 1e3) <= 1e-6 * max(1.0, r["algbw"]), r
    assert abs(r["busbw"] - r["algbw"]) <= 1e-9 * max(1.0, r["algbw"]), r  # 2(n-1)/n = 1 at n = 2
assert all(r["path"].startswith("raw Gloo") == r["raw"] for r in rows)
print(f"ok: {len(rows)} rows")
PY
