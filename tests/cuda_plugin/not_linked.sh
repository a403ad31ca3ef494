# cuda_plugin.not_linked: in a CUDA build only the plugin links the CUDA runtime, cuBLAS and
# NCCL. Every program's DT_NEEDED, and everything ldd resolves for it, names none of them;
# the plugin names them (so the pattern is known to match); the plugin exports its entry
# point alone; and every Tandem symbol it leaves undefined is exported by tandem-train and
# by tandem-bench-collectives (which links the least), so dlopen binds it to their copy.
#   tests/cuda_plugin/not_linked.sh BIN_DIR LIB_DIR TANDEM_CUDA
source "$(dirname "$0")/../e2e/lib.sh"
LIB="$2"
if [ "$3" != ON ]; then echo "SKIP: this build has no CUDA (TANDEM_CUDA=$3): there is no plugin"; exit 77; fi
PLUGIN="$LIB/libtandem_cuda.so"
CUDA_LIBS='libcudart|libcublas|libnccl|libcuda\.'
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; FAILED=1; }

[ -f "$PLUGIN" ] || { echo "FAIL: $PLUGIN was not built"; exit 1; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

for name in tandem-train tandemrun tandem-bench-collectives tandem-ckpt tandem-trace tandem-bench-bf16 \
            tandem_unit_tests tandem_gpu_tests tandem_gpu_count; do
  p="$BIN/$name"
  if [ ! -x "$p" ]; then
    case "$name" in tandem-train | tandemrun) bad "$p was not built" ;; *) echo "note: $name not built, not checked" ;; esac
    continue
  fi
  # Captured first: under pipefail, grep -q closing the pipe early could fail the writer
  # and turn a match into a silent pass.
  deps="$(needed "$p")"
  resolved="$(ldd "$p" 2>&1)"
  if grep -qE "$CUDA_LIBS" <<<"$deps"; then
    bad "$name's DT_NEEDED names a CUDA library: $(grep -E "$CUDA_LIBS" <<<"$deps" | tr '\n' ' ')"
  elif grep -qE "$CUDA_LIBS" <<<"$resolved"; then
    bad "$name loads a CUDA library through a dependency: $(grep -E "$CUDA_LIBS" <<<"$resolved" | tr '\n' ' ')"
  else
    ok "$name: no CUDA, cuBLAS or NCCL library in its DT_NEEDED ($(wc -l <<<"$deps") entries) nor in ldd"
  fi
done

plugin_deps="$(needed "$PLUGIN")"
for lib in libcudart libcublas; do
  if grep -q "^$lib" <<<"$plugin_deps"; then ok "the plugin needs $lib"; else bad "the plugin does not need $lib"; fi
done

exported="$(nm -D --defined-only "$PLUGIN" | awk '{print $3}' | sort -u | tr '\n' ' ')"
if [ "$exported" = "tandem_cuda_plugin " ]; then
  ok "the plugin exports tandem_cuda_plugin alone"
else
  bad "the plugin exports more than its entry point: ${exported:0:400}"
fi

mapfile -t wanted < <(nm -D --undefined-only "$PLUGIN" | awk '{print $2}' | grep 'tandem' | sed 's/@.*//' | sort -u)
if [ ${#wanted[@]} -eq 0 ]; then
  echo "note: the plugin uses no Tandem symbol of the program"
fi
for name in tandem-train tandem-bench-collectives; do
  [ -x "$BIN/$name" ] || continue
  nm -D --defined-only "$BIN/$name" | awk '{print $3}' | sort -u >"$TMP/$name.exported"
  missing="$(printf '%s\n' "${wanted[@]}" | grep -v '^$' | comm -23 - "$TMP/$name.exported" | head -5)"
  if [ -z "$missing" ]; then
    ok "$name exports all ${#wanted[@]} Tandem symbols the plugin binds to"
  else
    bad "$name does not export what the plugin needs: $(echo "$missing" | c++filt | tr '\n' ';')"
  fi
done
finish
