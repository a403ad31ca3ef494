#!/usr/bin/env bash
# Fails when a file of the repository refers to a path outside it: a user who clones the
# repository must find every document, header and link it names inside the clone.
# Invariant checked, on every tracked (or new, not ignored) file, naming file:line:
#   - no development-machine paths: the shared folder beside the checkout, the work tree
#     it sits in, absolute paths into a home directory (a user's, or root's);
#   - no upper-case document name (like README.md) that no file of the repository has;
#   - a relative path in a markdown link or image, or in an #include, resolved against the
#     directory of the file that holds it, stays inside the repository (a doc linking a
#     sibling doc through a parent directory is fine); an #include of an absolute path fails.
# Markdown links inside fenced code blocks are not links and are not checked.
# usage: no_outside_paths.sh [ROOT]   (default: the repository holding this script)
set -uo pipefail
ROOT="$(cd "${1:-$(dirname "$0")/../..}" && pwd)"
cd "$ROOT" || exit 1

# The patterns are assembled from pieces so that this file does not match them itself.
UP=".."
SHARED="$UP/shared"
WORK="/wor""k/"

# The tracked files plus new ones git does not ignore; without git (or where git refuses
# the checkout, e.g. another user's), every file outside .git and the build directories.
files=()
if [ -e .git ] && command -v git >/dev/null && listed="$(git ls-files -z --cached --others --exclude-standard 2>/dev/null | tr '\0' '\n')"; then
  while IFS= read -r f; do [ -f "$f" ] && files+=("$f"); done <<<"$listed"
fi
if [ "${#files[@]}" -eq 0 ]; then
  while IFS= read -r -d '' f; do files+=("${f#./}"); done \
    < <(find . \( -path './.git' -o -path './build' -o -path './build-*' -o -name CMakeFiles \) -prune \
             -o -type f -print0)
fi
if [ "${#files[@]}" -eq 0 ]; then
  echo "FAIL: no files found under $ROOT"
  exit 1
fi

found="$(
  # 1. Paths of the development machine (-I: binary files are skipped).
  printf '%s\0' "${files[@]}" | xargs -0 grep -nIHF -e "$SHARED" -e "$WORK" -- |
    sed 's/^\([^:]*:[0-9]*\):/\1: a path outside the repository: /'
  printf '%s\0' "${files[@]}" |
    xargs -0 grep -nIHE -- '(^|[^[:alnum:]_.$}/~-])(/home/[[:alnum:]_.-]+|/root|/Users/[[:alnum:]_.-]+)(/|$|[[:space:]"'"'"'`)])' |
    sed 's/^\([^:]*:[0-9]*\):/\1: an absolute path into a home directory: /'

  # 2. Upper-case document names that no file of the repository has.
  known="$(printf '%s\n' "${files[@]##*/}" | grep -E '^[A-Z][A-Z0-9_-]*\.md$' | sort -u)"
  printf '%s\0' "${files[@]}" | xargs -0 grep -nIHoE -- '\b[A-Z][A-Z0-9_-]*\.md\b' |
    while IFS= read -r hit; do
      name="${hit##*:}"
      grep -qxF -- "$name" <<<"$known" || echo "${hit%:*}: names $name, which is not in the repository"
    done

  # 3. Relative paths in markdown links and #includes must stay inside the repository.
  printf '%s\0' "${files[@]}" | grep -zE '\.(md|c|cc|cpp|cxx|h|hh|hpp|cu|cuh|inl)$' |
    xargs -0 -r awk '
      # Prints why `target`, written in `file`, leaves the repository, or "".
      function escapes(file, target,    n, parts, depth, i, k) {
        if (target ~ /^\//) return "is absolute"
        n = split(file, parts, "/")
        depth = n - 1                      # directories above the file, inside the repository
        k = split(target, parts, "/")
        for (i = 1; i <= k; i++) {
          if (parts[i] == "..") { if (--depth < 0) return "climbs above the repository root" }
          else if (parts[i] != "." && parts[i] != "") depth++
        }
        return ""
      }
      function report(target, why) { printf "%s:%d: %s %s\n", FILENAME, FNR, target, why }
      FNR == 1 { md = FILENAME ~ /\.md$/; fence = 0 }
      md && /^[[:space:]]*(```|~~~)/ { fence = !fence; next }
      md && !fence {
        line = $0
        # [text](target "title"), ![alt](target), [id]: target, src="target", href="target"
        while (match(line, /\]\([^)]*\)|^[[:space:]]*\[[^]]+\]:[[:space:]]*[^[:space:]]+|(src|href)="[^"]*"/)) {
          t = substr(line, RSTART, RLENGTH)
          line = substr(line, RSTART + RLENGTH)
          if (t ~ /^\]\(/) t = substr(t, 3, length(t) - 3)
          else if (t ~ /="/) { sub(/^[a-z]*="/, "", t); sub(/"$/, "", t) }
          else sub(/^[[:space:]]*\[[^]]+\]:[[:space:]]*/, "", t)
          sub(/^[[:space:]]*</, "", t); sub(/>.*$/, "", t)
          sub(/[[:space:]].*$/, "", t)     # a title after the target
          sub(/[#?].*$/, "", t)            # an anchor or a query
          if (t == "" || t ~ /^[A-Za-z][A-Za-z0-9+.-]*:/) continue   # http:, mailto:, ...
          if (t ~ /^\//) continue          # GitHub resolves /x from the repository root
          why = escapes(FILENAME, t)
          if (why != "") report("link " t, why)
        }
      }
      !md && /^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]/ {
        t = $0
        sub(/^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]/, "", t)
        sub(/[">].*$/, "", t)
        if (t ~ /^\// || t ~ /(^|\/)\.\.\//) {
          why = escapes(FILENAME, t)
          if (why != "") report("#include " t, why)
        }
      }'
)"

if [ -n "$found" ]; then
  echo "$found"
  echo "FAIL: $(grep -c '' <<<"$found") reference(s) to paths outside the repository (checked ${#files[@]} files)"
  exit 1
fi
echo "ok: ${#files[@]} files refer to no path outside the repository"
