#!/usr/bin/env python3
"""Doc-link check: every markdown link and every repository path named in README.md, docs/ and
the comments of sources, tests, benchmarks, scripts, tools, CMake files and examples exists.

Checked:
  - markdown links [text](target) in *.md files (not http(s):, mailto: or #anchors), resolved
    against the file's folder;
  - repository paths in *.md files and in the comments of every other file (// and /* */ in C++
    and CUDA, # elsewhere; string literals are code, not comments): tokens starting with a top-level folder
    (docs/, src/, tests/, bench/, tools/, scripts/, examples/, data/, cmake/, .ci/), resolved
    against the repository root, and tokens starting with a module folder of src/ (train/,
    perf/, ...) that name a file (an extension or a glob '*'), resolved against src/; a '*' is a
    glob that must match at least one file;
  - the founding text's name DESIGN.md, which lives on as docs/architecture.md.

Usage: tools/check_doc_links.py [--root DIR]. Exit 0 when clean, 1 with one line per broken
reference (file:line: what).
"""
import argparse
import glob
import pathlib
import re
import sys

TOP = ["docs", "src", "tests", "bench", "tools", "scripts", "examples", "data", "cmake", ".ci"]
SCANNED_SUFFIXES = {".md", ".h", ".cc", ".cu", ".cuh", ".py", ".sh", ".txt", ".cmake", ".yaml",
                    ".json", ".in"}
SKIPPED_DIRS = {".git", "build", "node_modules"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path token: not preceded by a path character (so "/abs/examples/x" and "a.src/b" are not
# repository paths), then folder/..., ending in a word character, '*' or '/'.
PATH_CHARS = r"[\w.*+-]"
TOP_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP) + r")(?:/" +
                      PATH_CHARS + r"+)+/?)")
DESIGN = re.compile(r"(?<![\w./-])DESIGN(?:\.md| §)")


def modules(root):
    return sorted({p.name for p in (root / "src").iterdir() if p.is_dir()})


def exists(base, rel):
    rel = rel.rstrip("/")
    while rel.endswith("."):
        rel = rel[:-1]
    if "*" in rel:
        if glob.glob(str(base / rel)):
            return True
        # A pathspec like src/*.cc: the name pattern anywhere below the folder.
        folder, _, name = rel.rpartition("/")
        return bool(glob.glob(str(base / folder / "**" / name), recursive=True))
    return (base / rel).exists()


C_FAMILY = {".h", ".cc", ".cu", ".cuh"}
STRING = re.compile(r'"(?:\\.|[^"\\])*"' + "|" + r"'(?:\\.|[^'\\])*'")


def comment_lines(path, text):
    """(line number, text) of what a reader sees as prose: every line of a markdown file, the
    comments of other files."""
    lines = text.splitlines()
    if path.suffix == ".md":
        return list(enumerate(lines, 1))
    out = []
    in_block = False
    for n, line in enumerate(lines, 1):
        if path.suffix in C_FAMILY:
            if in_block:
                end = line.find("*/")
                out.append((n, line if end < 0 else line[:end]))
                if end < 0:
                    continue
                in_block = False
                line = line[end + 2:]
            code = STRING.sub('""', line)
            if "//" in code:
                out.append((n, code[code.index("//") + 2:]))
            elif "/*" in code:
                rest = code[code.index("/*") + 2:]
                end = rest.find("*/")
                out.append((n, rest if end < 0 else rest[:end]))
                in_block = end < 0
        else:
            code = STRING.sub('""', line) if path.suffix != ".yaml" else line
            if "#" in code:
                out.append((n, code[code.index("#") + 1:]))
    return out


def scanned_files(root):
    for path in sorted(root.rglob("*")):
        if not path.is_file() or any(part in SKIPPED_DIRS or part.startswith("build")
                                     for part in path.relative_to(root).parts[:-1]):
            continue
        if path.suffix in SCANNED_SUFFIXES or path.name in ("run",):
            yield path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    root = pathlib.Path(args.root).resolve()
    mods = modules(root)
    module_path = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(m) for m in mods) +
                             r")(?:/" + PATH_CHARS + r"+)+)")
    problems = []
    for path in scanned_files(root):
        rel_file = path.relative_to(root)
        if rel_file.as_posix() == "tools/check_doc_links.py":
            continue  # this file names the patterns it looks for
        text = path.read_text(errors="replace")
        for lineno, line in comment_lines(path, text):
            where = f"{rel_file}:{lineno}"
            if path.suffix == ".md":
                for target in LINK.findall(line):
                    if re.match(r"^(https?:|mailto:|#)", target):
                        continue
                    file_part = target.split("#", 1)[0]
                    if file_part and not exists(path.parent, file_part):
                        problems.append(f"{where}: link to {target}: no such file")
            for m in TOP_PATH.finditer(line):
                token = m.group(1)
                if not exists(root, token):
                    problems.append(f"{where}: {token}: no such file or folder")
            for m in module_path.finditer(line):
                token = m.group(1)
                last = token.rsplit("/", 1)[-1]
                if "*" not in token and "." not in last:
                    continue  # prose like "plan/predict/simulate", not a file name
                if not exists(root / "src", token) and not exists(path.parent, token):
                    problems.append(f"{where}: {token}: no such file under src/")
            for m in DESIGN.finditer(line):
                problems.append(f"{where}: {m.group(0)}: the design lives in docs/architecture.md")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken reference(s)")
        return 1
    print("doc links: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
