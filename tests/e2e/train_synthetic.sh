# A short synthetic run: every contract summary key is present, it learns, and two runs
# with the same seed end with bit-identical parameters.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
ARGS=(--data synthetic --synthetic-train 4096 --synthetic-test 1024 --epochs 2 --batch-size 64
      --hidden 64 --lr 0.05 --no-progress --seed 7)
expect 0 "done:" -- "$T" "${ARGS[@]}" --summary-json "$TMP/a.json"
expect 0 "done:" -- "$T" "${ARGS[@]}" --summary-json "$TMP/b.json"
expect 0 "done:" -- "$T" "${ARGS[@]}" --seed 8 --summary-json "$TMP/c.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/a.json" --min-accuracy 0.9 \
  --same-checksum "$TMP/b.json" --other-checksum "$TMP/c.json" --mode single --steps 128
finish
