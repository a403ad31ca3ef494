"""docs/api.md's code is compiled code: every ```cpp block in it must be, verbatim (up
to common indentation), a region between "// [snippet: NAME]" and "// [end]" of
tests/api/api_snippets.cpp (compiled and run by tandem_api_tests) or of an example's
main.cpp (built and run by tests/install/examples.sh), and every region must be quoted.
Prints the first block that is not, and exits 1."""
import pathlib
import re
import sys
import textwrap

root = pathlib.Path(sys.argv[1])
doc = root / "docs" / "api.md"
sources = [root / "tests" / "api" / "api_snippets.cpp"] + sorted((root / "examples").glob("*/main.cpp"))


def normalise(lines):
    text = textwrap.dedent("\n".join(lines)).strip("\n")
    return "\n".join(line.rstrip() for line in text.split("\n"))


regions = {}
for src in sources:
    if not src.exists():
        continue
    lines = src.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"\s*// \[snippet: ([\w-]+)\]\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not re.match(r"\s*// \[end\]\s*$", lines[j]):
                j += 1
            if j == len(lines):
                sys.exit(f"{src}:{i + 1}: snippet '{m.group(1)}' has no '// [end]'")
            regions[(str(src.relative_to(root)), m.group(1))] = normalise(lines[i + 1:j])
            i = j
        i += 1

blocks = re.findall(r"```cpp\n(.*?)```", doc.read_text(), flags=re.S)
if not blocks:
    sys.exit("docs/api.md has no cpp block")
quoted = set()
for n, block in enumerate(blocks, 1):
    text = normalise(block.rstrip("\n").split("\n"))
    match = [key for key, region in regions.items() if region == text]
    if not match:
        first = text.split("\n")[0]
        sys.exit(f"docs/api.md: cpp block {n} (starting '{first}') is not a snippet region of "
                 f"{', '.join(str(s.relative_to(root)) for s in sources)}: update it from the code")
    quoted.update(match)
unquoted = sorted(set(regions) - quoted)
if unquoted:
    sys.exit("snippet regions that docs/api.md does not quote: " + ", ".join(f"{f}:{name}" for f, name in unquoted))
print(f"ok: docs/api.md's {len(blocks)} cpp blocks are compiled code ({len(regions)} regions)")
