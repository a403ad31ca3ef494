# tandem-plan (runtime/plan/cost_model.h, docs/scaling.md): a real 2-rank DDP run's summary
# carries the profile (grad_ready) and the buckets' own times, which fit and predict take;
# a hand-made profile on hand-made links gives predictions worked out by hand (ring of 2 at
# 8 Gbit/s, no latency: 1 ms per MB); a fitted line from exact rows; bad input exits 2
# naming the file or flag.
source "$(dirname "$0")/lib.sh"
P="$BIN/tandem-plan"

expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$BIN/tandem-train" --data synthetic \
  --synthetic-train 1024 --model mlp --hidden 256 --max-steps 10 --batch-size 32 --mode ddp --no-progress \
  --threads 1 --summary-json "$TMP/run.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/run.json"
expect 0 "(the job's buckets): shm all-reduce over 2 ranks, 2 sizes" -- "$P" fit "$TMP/run.json"
# --bucket-cap-mb auto: chosen after step 4 from this job's own times, tried for steps 6-8
# (kept only if no slower, else the caps before come back), logged, in the summary; the
# buckets are those the caps in force cut, and the parameters bit-identical to the fixed
# caps' (two ranks: every element's sum is the same whatever the buckets).
expect 0 "DDP buckets (--bucket-cap-mb auto): cap" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- \
  "$BIN/tandem-train" --data synthetic --synthetic-train 1024 --model mlp --hidden 256 --max-steps 10 --batch-size 32 \
  --mode ddp --no-progress --threads 1 --bucket-cap-mb auto --summary-json "$TMP/auto.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/auto.json" --same-checksum "$TMP/run.json"
expect 0 "auto buckets ok" -- python3 - "$TMP/auto.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
a = s["bucket_auto"]
assert a and len(a["probe"]) >= 2 and a["predicted_exposed_ms"] <= a["before_exposed_ms"], a
cap, first = (int(round(s[k] * 2**20)) for k in ("bucket_cap_mb", "first_bucket_mb"))
# No trial when the chosen caps cut the same buckets; else kept exactly when no slower.
assert a["trial_ms"] is None and a["kept"] or a["kept"] == (a["trial_ms"] <= a["before_ms"]), a
assert a["kept"] or (cap, first) == (25 << 20, 1 << 20), (a, cap, first)
cut = []  # the reducer's cut (runtime/plan/cost_model.h, cut_buckets)
for g in s["grad_ready"]:
    limit = first if len(cut) <= 1 else cap
    if not cut or cut[-1] + g["bytes"] > limit:
        cut.append(0)
    cut[-1] += g["bytes"]
assert cut == [b["bytes"] for b in s["buckets"]], (cut, s["buckets"])
print("auto buckets ok")
PY
expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$BIN/tandem-train" --data synthetic \
  --synthetic-train 1024 --model mlp --hidden 256 --max-steps 6 --batch-size 32 --mode ddp --no-progress --threads 1 \
  --first-bucket-mb 0.125 --summary-json "$TMP/first.json"
expect 0 "first bucket 11304 B" -- python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["first_bucket_mb"] == 0.125 and s["bucket_cap_mb"] == 25 and s["bucket_auto"] is None, s
print("first bucket", s["buckets"][0]["bytes"], "B")' "$TMP/first.json"
expect 0 "measured  step" -- "$P" predict --summary "$TMP/run.json" --measured "$TMP/run.json"

# Forward 5 ms, backward 10, optimizer 1; gradients of 3, 1, 1 and 2 MB ready 2, 4, 6 and
# 10 ms into backward (7, 9, 11, 15 from the micro-batch's start). One bucket each: 7-10,
# 10-11, 11-12, 15-17 ms: 2 ms exposed, a step of 18. The default cut (25 MB, first 1 MiB)
# puts the last three in one bucket, ready at 15: 15-19, a step of 20.
python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
grads = [("w3", 3000000, 7.0), ("b3", 1000000, 9.0), ("w2", 1000000, 11.0), ("w1", 2000000, 15.0)]
json.dump({"model": "mlp", "backend": "gloo", "world_size": 2, "grad_accum": 1, "step_ms": {"mean": 16.0},
           "forward_ms": 5.0, "backward_ms": 10.0, "optimizer_ms": 1.0, "exposed_comm_ms": 0.0,
           "buckets": [], "grad_ready": [{"name": n, "bytes": b, "ready_ms": r} for n, b, r in grads]},
          open(d + "/profile.json", "w"))
rows = [{"path": "group", "raw": False, "in_place": True, "size": n, "count": n // 4, "time_us": 20 + n * 0.001}
        for n in (1000, 1000000)]
json.dump({"op": "allreduce", "backend": "gloo", "world_size": 4, "rows": rows}, open(d + "/bench.json", "w"))
json.dump({"op": "allreduce", "backend": "gloo", "world_size": 4, "rows": rows[:1]}, open(d + "/one_row.json", "w"))
json.dump({"model": "mlp", "world_size": 2, "step_ms": {"mean": 1}, "forward_ms": 1, "backward_ms": 1,
           "optimizer_ms": 1, "exposed_comm_ms": 0}, open(d + "/no_profile.json", "w"))
PY
expect 0 "predicted step 18.00 ms = compute 16.00 + exposed comm 2.00 (comm 7.00); efficiency 88.9%" -- \
  "$P" predict --summary "$TMP/profile.json" --intra 0:8 --bucket-cap-mb 1 --first-bucket-mb 1
expect 0 "predicted step 20.00 ms = compute 16.00 + exposed comm 4.00 (comm 7.00); efficiency 80.0%" -- \
  "$P" predict --summary "$TMP/profile.json" --intra 0:8
expect 0 "predicted 18.00 ms against 20.00 ms at 25 MB / 1 MB (+11.1%)" -- \
  "$P" predict --summary "$TMP/profile.json" --intra 0:8 --bucket-cap-mb auto
# Two nodes of one rank each over an 8 Gbit/s port: the same ring of two.
expect 0 "2 node(s) x 1 rank(s), ring all-reduce, intra 0:1000, inter 0:8" -- \
  "$P" predict --summary "$TMP/profile.json" --nodes 1,2 --ranks-per-node 1 --inter 0:8
expect 0 "       3      2000000      15.00      15.00      17.00" -- \
  "$P" predict --summary "$TMP/profile.json" --intra 0:8 --bucket-cap-mb 1 --first-bucket-mb 1 --buckets
# Exact rows of 20 us + 1 ns/B over 4 ranks: a ring's alpha is 20/6 us, its beta 4/6 ns/B.
expect 0 "fit: t = 20.00 us + 1.0000 ns/B" -- "$P" fit "$TMP/bench.json"
expect 0 "as a ring's link over 4 ranks: alpha 3.33 us, 12 Gbit/s" -- "$P" fit "$TMP/bench.json"

expect 2 "$TMP/missing.json: cannot open" -- "$P" predict --summary "$TMP/missing.json"
expect 2 "$TMP/no_profile.json: no \"grad_ready\" profile" -- "$P" predict --summary "$TMP/no_profile.json"
expect 2 "$TMP/one_row.json: fewer than two all-reduces" -- "$P" fit "$TMP/one_row.json"
expect 2 "$TMP/no_profile.json: neither an all-reduce run" -- "$P" fit "$TMP/no_profile.json"
expect 2 "$TMP/profile.json: fewer than two all-reduces" -- "$P" fit "$TMP/profile.json"
expect 2 "--nodes" -- "$P" predict --summary "$TMP/profile.json" --nodes 0
expect 2 "--intra takes ALPHA_US:GBIT" -- "$P" predict --summary "$TMP/profile.json" --intra 5
expect 2 "--bucket-cap-mb takes a size in MiB" -- "$P" predict --summary "$TMP/profile.json" --bucket-cap-mb 0
expect 2 "unknown command 'simulate'" -- "$P" simulate
finish
