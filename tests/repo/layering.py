"""The folders' layering, checked include by include. docs/architecture.md ("Layers")
declares the order once, bottom first, as the fenced block after the line
"<!-- layering: tests/repo/layering.py reads the next block -->": one folder per line
(its first word). A source file may include files of its own folder and of folders on
earlier lines, never of a later one, so no include loop between folders can exist.
Every tracked .h/.cpp/.cu/.cuh outside tests/, examples/ and scripts/ (the consumers, which
may include anything) must sit in a declared folder. An include is resolved as the compiler
would: next to the including file, then from the source root, then under include/ (and
"tandem/x" as the public-header link of x, cmake/Package.cmake); one that names no file of
the tree (a system header, the generated <tandem/version.h>) is not Tandem's to order.

  python3 layering.py ROOT                       check the tree; exit 1 naming each breach
  python3 layering.py ROOT --add FILE=HEADER     the same, as if FILE also included HEADER
                                                 (tests/repo: an upward include must fail)
"""
import pathlib
import re
import subprocess
import sys

MARKER = "<!-- layering: tests/repo/layering.py reads the next block -->"
SOURCES = (".h", ".cpp", ".cu", ".cuh")
CONSUMERS = ("tests/", "examples/", "scripts/")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def declared_order(root):
    text = (root / "docs" / "architecture.md").read_text()
    at = text.find(MARKER)
    if at < 0:
        sys.exit(f"layering: docs/architecture.md has no line '{MARKER}'")
    m = re.search(r"```[a-z]*\n(.*?)```", text[at:], re.S)
    if not m:
        sys.exit("layering: no fenced block follows the layering marker in docs/architecture.md")
    order = [line.split()[0] for line in m.group(1).splitlines() if line.strip()]
    if len(set(order)) != len(order):
        sys.exit("layering: a folder is declared twice in docs/architecture.md: " + " ".join(order))
    return {folder: i for i, folder in enumerate(order)}


def tracked(root):
    out = subprocess.run(["git", "-C", str(root), "ls-files"], check=True, capture_output=True, text=True).stdout
    return [f for f in out.split("\n") if f.endswith(SOURCES)]


def resolve(name, including, files):
    here = str(pathlib.PurePosixPath(including).parent)
    candidates = [str(pathlib.PurePosixPath(here) / name), name, "include/" + name]
    if name.startswith("tandem/"):
        candidates.append(name[len("tandem/"):])
    for c in candidates:
        c = str(pathlib.PurePosixPath(c))
        parts = []
        for p in c.split("/"):
            if p == "..":
                parts = parts[:-1]
            elif p != ".":
                parts.append(p)
        c = "/".join(parts)
        if c in files:
            return c
    return None


def main():
    root = pathlib.Path(sys.argv[1])
    added = {}
    args = sys.argv[2:]
    while args:
        if args[0] != "--add" or len(args) < 2 or "=" not in args[1]:
            sys.exit("usage: layering.py ROOT [--add FILE=HEADER]...")
        f, h = args[1].split("=", 1)
        added.setdefault(f, []).append(h)
        args = args[2:]
    order = declared_order(root)
    files = set(tracked(root))
    problems = []
    checked = 0
    for f in sorted(files):
        if f.startswith(CONSUMERS):
            continue
        checked += 1
        folder = str(pathlib.PurePosixPath(f).parent)
        if folder not in order:
            problems.append(f"{f}: its folder {folder}/ is not in docs/architecture.md's layering")
            continue
        names = INCLUDE.findall((root / f).read_text(errors="replace")) + added.get(f, [])
        for name in names:
            target = resolve(name, f, files)
            if target is None or target.startswith(CONSUMERS):
                continue
            to = str(pathlib.PurePosixPath(target).parent)
            if to not in order:
                continue  # reported as that file's own problem
            if order[to] > order[folder]:
                problems.append(f"{f} includes {name}: {to}/ is above {folder}/ in docs/architecture.md's layering")
    for p in problems:
        print("layering: " + p)
    if problems:
        print(f"layering: {len(problems)} problem(s) with the declared order (docs/architecture.md, \"Layers\")")
        return 1
    print(f"layering: {checked} files, every include down the {len(order)} declared folders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
