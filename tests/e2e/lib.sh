# Helpers for the end-to-end tests: run a command, assert its exit code and output.
set -uo pipefail
BIN="$1"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
FAILED=0

# expect CODE NEEDLE -- CMD...: CMD exits CODE and its output contains NEEDLE.
expect() {
  local code="$1" needle="$2"; shift 3
  local out rc
  out="$("$@" 2>&1)"; rc=$?
  if [ "$rc" -ne "$code" ]; then
    echo "FAIL: '$*' exited $rc, expected $code. Output:"; echo "$out" | tail -5; FAILED=1; return
  fi
  if ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: '$*' output lacks '$needle'. Output:"; echo "$out" | tail -5; FAILED=1; return
  fi
  echo "ok: exit $rc, '$needle' <- $*"
}

finish() {
  if [ "$FAILED" -ne 0 ]; then echo "SOME CHECKS FAILED"; exit 1; fi
  echo "all checks passed"
}
