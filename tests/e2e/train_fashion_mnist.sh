# The real data set, briefly: 300 steps of the MLP reach 80% test accuracy (10 epochs
# reach 89%+, docs/accuracy.md). Skips when the data set is absent.
source "$(dirname "$0")/lib.sh"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: /usr/share/datasets/fashion-mnist absent (install dataset-fashion-mnist)"; exit 0
fi
T="$BIN/tandem-train"
expect 0 "done:" -- "$T" --model mlp --hidden 256 --max-steps 300 --batch-size 128 --lr 0.05 --no-progress \
  --summary-json "$TMP/s.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/s.json" --min-accuracy 0.80 --steps 300
finish
