#!/usr/bin/env python3
"""Makes data/corpus/kjv.txt, the shipped training corpus, from the King James Bible as printed by
Debian's `bible-kjv` package (e.g. `bible -f 'Genesis 1:1-Revelation 22:21' > kjv_raw.txt`; any text
in that layout works).

Input layout: a chapter header line ("Genesis 1", "1 Samuel 3"), a blank line, then verses that start
with two spaces and the verse number ("  1 In the beginning ..."), wrapped at 80 columns; a trailing
program legend (indented lines after the last verse) is dropped.

Output: plain prose. Each book starts with its name on a line of its own and a blank line; each
chapter becomes one paragraph (its verses joined, verse numbers dropped) wrapped at 76 columns, and
paragraphs are separated by one blank line. Whole books are taken in canonical order while the output
stays within --max-bytes (default 2,000,000). Deterministic: same input, same bytes.

Usage: tools/make_kjv_corpus.py RAW.txt [-o data/corpus/kjv.txt] [--max-bytes N]
"""
import argparse
import re
import sys
import textwrap

CHAPTER = re.compile(r"^(\S.*) (\d+)$")  # "Genesis 1", "Song of Solomon 8", "1 Samuel 3"
VERSE = re.compile(r"^  (\d+) (.*)$")    # "  12 And the earth ..."


def parse_books(lines):
    """Returns [(book, [chapter_text, ...]), ...] in input order."""
    books = []
    verses = None  # verses of the current chapter
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        m = CHAPTER.match(line)
        if m and not line.startswith(" "):
            book = m.group(1)
            if not books or books[-1][0] != book:
                books.append((book, []))
            verses = []
            books[-1][1].append(verses)
            continue
        m = VERSE.match(line)
        if m and verses is not None:
            verses.append(m.group(2).strip())
        elif line.startswith(" "):
            verses = None  # an indented line that is not a verse: the trailing legend
        elif verses:
            verses[-1] += " " + line.strip()  # continuation of the current verse
    return [(book, [" ".join(v) for v in chapters if v]) for book, chapters in books]


def render_book(book, chapters, width):
    parts = [book + "\n"]
    for text in chapters:
        parts.append("\n" + textwrap.fill(text, width=width, break_on_hyphens=False) + "\n")
    return "".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw")
    parser.add_argument("-o", "--output", default="data/corpus/kjv.txt")
    parser.add_argument("--max-bytes", type=int, default=2_000_000)
    parser.add_argument("--width", type=int, default=76)
    args = parser.parse_args()
    with open(args.raw, encoding="ascii") as f:
        books = parse_books(f)
    if not books:
        sys.exit(f"{args.raw}: no chapters found")
    out = ""
    taken = []
    for book, chapters in books:
        block = render_book(book, chapters, args.width)
        candidate = out + ("\n" if out else "") + block
        if len(candidate.encode("ascii")) > args.max_bytes:
            break
        out = candidate
        taken.append(book)
    with open(args.output, "w", encoding="ascii", newline="\n") as f:
        f.write(out)
    print(f"{args.output}: {len(out)} bytes, {len(taken)} books ({taken[0]} .. {taken[-1]})")


if __name__ == "__main__":
    main()
