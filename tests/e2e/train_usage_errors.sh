# Bad flags exit 2 with a message naming the flag and what is accepted.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
expect 2 "--batch-size" -- "$T" --batch-size -5
expect 2 "--batch-size" -- "$T" --batch-size 0
expect 2 "--model" -- "$T" --model resnet
expect 2 "mlp" -- "$T" --model resnet
expect 2 "--bogus" -- "$T" --bogus
expect 2 "--epochs" -- "$T" --epochs 0
expect 2 "--lr" -- "$T" --lr -1
expect 2 "--lr" -- "$T" --lr abc
expect 2 "--optimizer" -- "$T" --optimizer rmsprop
expect 2 "--data" -- "$T" --data cifar
expect 2 "--mode" -- "$T" --mode hybrid
expect 2 "--devices needs --mode dp" -- "$T" --devices 2
expect 1 "no CUDA GPU is visible" -- "$T" --device cuda --data synthetic --synthetic-train 256 --max-steps 1
expect 2 "--backend nccl needs --device cuda" -- "$T" --mode ddp --backend nccl
expect 0 "--batch-size" -- "$T" --help
finish
