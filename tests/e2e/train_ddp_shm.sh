# The demo's run (scripts/demo), short: the MLP on Fashion-MNIST (synthetic data when the
# data set is absent) with 2 DDP processes on the shm backend through tandemrun. Both ranks
# end with identical parameters and the run learns. Short enough for the arm64 stage, which
# runs it under qemu-aarch64 (scripts/test --arm64), where the shm backend's round protocol
# meets a weaker memory model than x86's.
source "$(dirname "$0")/lib.sh"
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then DATA=(--data fashion-mnist); else
  DATA=(--data synthetic --synthetic-train 4096 --synthetic-test 1024); fi
expect 0 "done:" -- "$BIN/tandemrun" --nproc-per-node 2 --master-port 0 -- "$BIN/tandem-train" --mode ddp \
  --backend shm --model mlp "${DATA[@]}" --hidden 128 --max-steps 50 --batch-size 32 --lr 0.05 --threads 1 \
  --no-progress --summary-json "$TMP/s.json"
expect 0 "summary ok" -- python3 "$(dirname "$0")/check_summary.py" "$TMP/s.json" --mode ddp --steps 50 \
  --replicas-identical --max-test-loss 1.2
expect 0 "shm, 2 ranks" -- python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["backend"] == "shm" and s["world_size"] == 2, (s["backend"], s["world_size"])
print("shm, 2 ranks")' "$TMP/s.json"
finish
