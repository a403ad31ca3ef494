# tandem-trace: a 2-rank DDP run under tandemrun writes trace.rank{0,1}.json (with the
# wall-clock anchor in otherData); two hand-made flight-recorder dumps join them; merge
# gives one trace with a process per rank, every span once, the recorder's ops on their
# track and each rank shifted by one constant (check_trace_merge.py). The run directory
# also holds the --summary-json file, which a directory scan skips. Then summary, and bad
# input: exit 2 and a message naming the file.
source "$(dirname "$0")/lib.sh"
HERE="$(dirname "$0")"
T="$BIN/tandem-trace"
RUN="$TMP/run"
mkdir -p "$RUN" "$TMP/bad" "$TMP/empty"

expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$BIN/tandem-train" --data synthetic \
  --synthetic-train 1024 --model mlp --hidden 32 --max-steps 6 --batch-size 32 --mode ddp --no-progress \
  --threads 1 --trace "$RUN/trace.json" --summary-json "$RUN/summary.json"
expect 0 "" -- python3 "$HERE/check_trace_merge.py" make-dumps "$RUN"

expect 0 "merged 2 trace(s) and 2 flight-recorder dump(s) of 2 rank(s)" -- "$T" merge -o "$TMP/merged.json" "$RUN"
expect 0 "merge ok" -- python3 "$HERE/check_trace_merge.py" check "$RUN" "$TMP/merged.json"
expect 0 "merged 2 trace(s)" -- "$T" merge --output "$TMP/files.json" "$RUN/trace.rank1.json" "$RUN/flight-rank0.json" \
  "$RUN/trace.rank0.json" "$RUN/flight-rank1.json"
expect 0 "same events" -- python3 -c '
import json, sys
a, b = (json.load(open(p))["traceEvents"] for p in sys.argv[1:])
assert a == b, "files named one by one merge differently from their directory"
print("same events")' "$TMP/merged.json" "$TMP/files.json"
expect 0 "skipped $RUN/summary.json" -- "$T" merge -o "$TMP/merged.json" "$RUN"
expect 0 "merged 2 trace(s) and 2 flight-recorder dump(s)" -- "$T" merge -o "$TMP/twice.json" "$RUN/trace.rank0.json" \
  "$RUN" "$RUN/"
expect 0 "merged 1 trace(s) and 0 flight-recorder dump(s) of 1 rank(s)" -- "$T" merge -o "$TMP/one.json" \
  "$RUN/trace.rank1.json"

expect 0 "running   allreduce #3 (f32, 4096 bytes) for 0.001 s at the dump" -- "$T" summary "$RUN"
expect 0 "last completed: broadcast #2 (bf16, 128 bytes)" -- "$T" summary "$RUN/flight-rank0.json"
expect 0 "queued    allgather #4" -- "$T" summary "$RUN/flight-rank0.json"
expect 0 "failed    allreduce #3" -- "$T" summary "$RUN/flight-rank1.json"

# Bad input: exit 2, the file and the problem named.
B="$TMP/bad"
echo 'not json {' >"$B/garbage.json"
python3 - "$RUN" "$B" <<'PY'
import json, sys
run, bad = sys.argv[1:]
t = json.load(open(f"{run}/trace.rank0.json"))
del t["otherData"]
json.dump(t, open(f"{bad}/old-trace.json", "w"))
d = json.load(open(f"{run}/flight-rank0.json"))
json.dump(dict(d, version=2), open(f"{bad}/v2.json", "w"))
json.dump(dict(d, format="someone-else"), open(f"{bad}/other-format.json", "w"))
json.dump({k: v for k, v in d.items() if k != "entries"}, open(f"{bad}/no-entries.json", "w"))
d["entries"][0]["state"] = "sleeping"
json.dump(d, open(f"{bad}/bad-state.json", "w"))
d["entries"][0]["state"] = "completed"
d["entries"][0]["seq"] = "703"
json.dump(d, open(f"{bad}/bad-seq.json", "w"))
PY
M=("$T" merge -o "$TMP/out.json")
expect 2 "$B/garbage.json: not JSON" -- "${M[@]}" "$B/garbage.json"
mkdir -p "$TMP/garbage-dir" && cp "$B/garbage.json" "$TMP/garbage-dir/"
expect 2 "$TMP/garbage-dir/garbage.json: not JSON (parse error at line 1" -- "${M[@]}" "$TMP/garbage-dir"
expect 2 "$RUN/summary.json: unknown format" -- "${M[@]}" "$RUN/summary.json"
expect 2 "$B/old-trace.json: a trace without otherData.origin_unix_us: it was written by an older tandem-train" -- \
  "${M[@]}" "$B/old-trace.json" "$RUN/trace.rank1.json"
expect 2 "$B/v2.json: flight-recorder format version 2 (this tandem-trace reads version 1)" -- "${M[@]}" "$B/v2.json"
expect 2 "$B/other-format.json: unknown format \"someone-else\"" -- "${M[@]}" "$B/other-format.json"
expect 2 "$B/no-entries.json: the dump has no \"entries\" array" -- "${M[@]}" "$B/no-entries.json"
expect 2 "$B/bad-state.json: entries[0] \"state\" \"sleeping\" is not queued" -- "${M[@]}" "$B/bad-state.json"
expect 2 "$B/bad-seq.json: entries[0] \"seq\" is not an integer" -- "${M[@]}" "$B/bad-seq.json"
cp "$RUN/trace.rank0.json" "$B/copy.json"
expect 2 "$B/copy.json: a second trace of rank 0 (the first is $RUN/trace.rank0.json)" -- "${M[@]}" "$RUN" "$B/copy.json"
expect 2 "$TMP/missing.json: no such file or directory" -- "${M[@]}" "$TMP/missing.json"
expect 2 "no inputs" -- "${M[@]}" "$TMP/empty"
expect 2 "$TMP/no-dir/out.json: cannot write the output" -- "$T" merge -o "$TMP/no-dir/out.json" "$RUN"
expect 2 "--output is required" -- "$T" merge "$RUN"
expect 2 "INPUT is required" -- "$T" merge -o "$TMP/out.json"
expect 2 "unknown command 'mrege'" -- "$T" mrege -o "$TMP/out.json" "$RUN"
expect 2 "A subcommand is required" -- "$T"
expect 2 "$B/garbage.json: not JSON" -- "$T" summary "$B/garbage.json"
expect 0 "tandem-trace " -- "$T" --version
if [ -e "$TMP/out.json" ] || [ -e "$TMP/out.json.tmp" ]; then echo "FAIL: a failed merge left an output"; FAILED=1; fi
finish
