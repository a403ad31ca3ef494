# Missing and malformed data files exit 1 with a message naming the file and the problem.
source "$(dirname "$0")/lib.sh"
T="$BIN/tandem-train"
COMMON=(--max-steps 1 --no-progress)
expect 1 "/nonexistent/fmnist" -- "$T" --data-dir /nonexistent/fmnist "${COMMON[@]}"
# The error goes to stderr (a launcher's failure report quotes a rank's stderr), not stdout.
"$T" --data-dir /nonexistent/fmnist "${COMMON[@]}" >"$TMP/out.txt" 2>"$TMP/err.txt"
if grep -q "tandem-train failed" "$TMP/err.txt" && ! grep -q "tandem-train failed" "$TMP/out.txt"; then
  echo "ok: the error is on stderr only"
else
  echo "FAIL: the error is not on stderr alone: stdout '$(cat "$TMP/out.txt")' stderr '$(cat "$TMP/err.txt")'"
  FAILED=1
fi

# A valid IDX pair of 4 images written by python's gzip, then damaged one way at a time.
make_set() {  # dir n_images n_labels image_magic truncate_bytes
  mkdir -p "$1"
  python3 - "$@" <<'PY'
import gzip, struct, sys
d, ni, nl, magic, trunc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 16), int(sys.argv[5])
img = struct.pack(">IIII", magic, ni, 28, 28) + bytes(ni * 784)
lab = struct.pack(">II", 0x801, nl) + bytes(nl)
if trunc: img = img[:-trunc]
for split in ("train", "t10k"):
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz", "wb") as f: f.write(img)
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz", "wb") as f: f.write(lab)
PY
}
make_set "$TMP/magic" 4 4 0x0000ffff 0
expect 1 "train-images-idx3-ubyte.gz" -- "$T" --data-dir "$TMP/magic" "${COMMON[@]}"
expect 1 "magic" -- "$T" --data-dir "$TMP/magic" "${COMMON[@]}"
make_set "$TMP/trunc" 4 4 0x00000803 100
expect 1 "train-images-idx3-ubyte.gz" -- "$T" --data-dir "$TMP/trunc" "${COMMON[@]}"
expect 1 "truncated" -- "$T" --data-dir "$TMP/trunc" "${COMMON[@]}"
make_set "$TMP/count" 4 5 0x00000803 0
expect 1 "train-labels-idx1-ubyte.gz" -- "$T" --data-dir "$TMP/count" "${COMMON[@]}"
mkdir -p "$TMP/missing" && cp "$TMP/count/train-images-idx3-ubyte.gz" "$TMP/missing/"
expect 1 "train-labels-idx1-ubyte.gz" -- "$T" --data-dir "$TMP/missing" "${COMMON[@]}"
finish
