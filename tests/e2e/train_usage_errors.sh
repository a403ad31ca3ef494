# Bad flags exit 2 with a message naming the flag and what is accepted.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
expect 2 "--batch-size" -- "$T" --batch-size -5
expect 2 "--batch-size" -- "$T" --batch-size 0
expect 2 "--model" -- "$T" --model vgg
expect 2 "mlp" -- "$T" --model vgg
expect 2 "--bogus" -- "$T" --bogus
expect 2 "--bucket-cap-mb takes a size in MiB or auto, not 'big'" -- "$T" --mode ddp --bucket-cap-mb big
expect 2 "--bucket-cap-mb auto needs --mode ddp" -- "$T" --bucket-cap-mb auto
expect 2 "not with --no-comm" -- "$T" --mode ddp --bucket-cap-mb auto --no-comm
expect 2 "it takes a fixed --bucket-cap-mb, not auto" -- "$T" --mode ddp --zero 1 --bucket-cap-mb auto
expect 2 "--first-bucket-mb must be positive" -- "$T" --mode ddp --first-bucket-mb 0
expect 2 "--epochs" -- "$T" --epochs 0
expect 2 "--lr" -- "$T" --lr -1
expect 2 "--lr" -- "$T" --lr abc
expect 2 "--optimizer" -- "$T" --optimizer rmsprop
expect 2 "--data" -- "$T" --data cifar
expect 2 "--mode" -- "$T" --mode hybrid
expect 2 "--devices needs --mode dp" -- "$T" --devices 2
expect 1 "no CUDA GPU is visible" -- "$T" --device cuda --data synthetic --synthetic-train 256 --max-steps 1
expect 2 "--backend nccl needs --device cuda" -- "$T" --mode ddp --backend nccl
expect 2 "--tf32 needs --device cuda" -- "$T" --tf32
expect 2 "--zero 2 is not built" -- "$T" --mode ddp --zero 2
expect 2 "--zero -1 is not built" -- "$T" --mode ddp --zero -1
expect 2 "--zero 1 needs --mode ddp" -- "$T" --zero 1
expect 2 "--zero 1 needs --mode ddp" -- "$T" --zero 1 --mode dp --devices 2
expect 2 "--zero" -- "$T" --mode ddp --zero one
expect 2 "takes no --comm-hook fp16" -- "$T" --mode ddp --zero 1 --comm-hook fp16
expect 2 "cannot run with --no-comm" -- "$T" --mode ddp --zero 1 --no-comm
expect 2 "--zero 1 with --device cuda needs --backend nccl" -- "$T" --mode ddp --zero 1 --device cuda --backend gloo
expect 2 "--precision: fp8 not in {fp32,bf16}" -- "$T" --precision fp8
expect 2 "--grad-reduce-dtype: x not in {fp32,bf16}" -- "$T" --mode ddp --grad-reduce-dtype x
expect 2 "--grad-reduce-dtype bf16 needs --mode ddp" -- "$T" --grad-reduce-dtype bf16
expect 2 "--grad-reduce-dtype bf16 contradicts --comm-hook fp16" -- "$T" --mode ddp --grad-reduce-dtype bf16 --comm-hook fp16
expect 2 "--grad-reduce-dtype fp32 contradicts --comm-hook bf16" -- "$T" --mode ddp --grad-reduce-dtype fp32 --comm-hook bf16
expect 2 "--elastic-batch: foo not in {auto,off,global,per-rank}" -- "$T" --mode ddp --elastic-batch foo
expect 0 "--precision" -- "$T" --help
expect 0 "--elastic-batch" -- "$T" --help
expect 0 "--zero" -- "$T" --help
expect 0 "--batch-size" -- "$T" --help
finish
