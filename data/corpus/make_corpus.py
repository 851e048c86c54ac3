"""Makes the bundled pretraining corpus from Python's documentation.

The prose of the Python 3.11 documentation (its reStructuredText sources, as
Debian's python3.11-doc ships them under /usr/share/doc/python3.11/html/
_sources): the tutorial, the HOWTOs, the FAQs, the language and library references and
the "What's New" pages, one paragraph per line. Markup, code, tables and
directives are dropped; a paragraph is kept when it has at least 8 words and
is mostly letters. Every 20th paragraph goes to valid.txt, the rest to
train.txt. The documentation is under the PSF License Agreement
(LICENSE.txt beside this file, extracted from the same sources).

  apt-get install python3.11-doc
  python3 data/corpus/make_corpus.py /usr/share/doc/python3.11/html/_sources data/corpus
  bazel run //client:trainyard -- vocab train --input $PWD/data/corpus/train.txt --size 400 \\
      --out $PWD/data/corpus/spm
"""
import os
import re
import sys

SECTIONS = ["tutorial", "howto", "faq", "reference", "library", "whatsnew"]

ROLE = re.compile(r":[a-zA-Z:]+:`(?:[^`<]*<)?([^`>]*)>?`")  # :ref:`text <target>` -> text / target
LITERAL = re.compile(r"``([^`]*)``")
EMPHASIS = re.compile(r"\*{1,2}([^*]+)\*{1,2}")
LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")
REFERENCE = re.compile(r"`([^`]+)`_+")


def clean(text):
    text = LINK.sub(r"\1", text)
    text = ROLE.sub(lambda m: m.group(1).lstrip("~!.").split(".")[-1] if "(" not in m.group(1) else m.group(1), text)
    text = LITERAL.sub(r"\1", text)
    text = REFERENCE.sub(r"\1", text)
    text = EMPHASIS.sub(r"\1", text)
    text = text.replace("\\", "")
    return " ".join(text.split())


def paragraphs(path):
    """The prose paragraphs of one .rst.txt file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    block, out = [], []
    skip_indent = None  # inside a directive or literal block: its indentation

    def flush():
        if block:
            out.append(clean(" ".join(block)))
            block.clear()

    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if stripped and indent <= skip_indent:
                skip_indent = None
            else:
                continue
        if not stripped:
            flush()
            continue
        if stripped.startswith(".. ") or stripped == "..":
            flush()
            skip_indent = indent
            continue
        if re.fullmatch(r"([=\-~^*#+\"'`.:])\1{2,}", stripped) or stripped.startswith(("+-", "|", ">>>", "...")):
            flush()  # section underlines, tables, line blocks, interactive sessions
            block.clear()
            continue
        if indent > 0 and not block:
            continue  # an indented block on its own: code or a quote
        if stripped.startswith(("* ", "- ", "#. ")) or re.match(r"\d+\. ", stripped):
            flush()
            stripped = stripped.split(" ", 1)[1] if " " in stripped else ""
        ends_literal = stripped.endswith("::")
        block.append(stripped[:-1] if ends_literal else stripped)
        if ends_literal:
            flush()
            skip_indent = indent
    flush()
    return out


def good(p):
    words = p.split()
    if len(words) < 8:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in p)
    return letters >= 0.85 * len(p)


def main():
    sources, out_dir = sys.argv[1], sys.argv[2]
    kept = []
    for section in SECTIONS:
        for root, _, files in sorted(os.walk(os.path.join(sources, section))):
            for name in sorted(files):
                if name.endswith(".rst.txt"):
                    kept.extend(p for p in paragraphs(os.path.join(root, name)) if good(p))
    with open(os.path.join(out_dir, "train.txt"), "w") as train, open(os.path.join(out_dir, "valid.txt"), "w") as valid:
        for i, p in enumerate(kept):
            (valid if i % 20 == 19 else train).write(p + "\n")
    # The licence, as the sources state it.
    with open(os.path.join(sources, "license.rst.txt"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("PSF LICENSE AGREEMENT FOR PYTHON")
    end = text.index("BEOPEN.COM LICENSE AGREEMENT")
    with open(os.path.join(sources, "copyright.rst.txt"), encoding="utf-8") as f:
        copyright_text = f.read()
    with open(os.path.join(out_dir, "LICENSE.txt"), "w") as f:
        f.write("The files train.txt and valid.txt are paragraphs of the Python 3.11 documentation\n"
                "(made by make_corpus.py), used under the PSF License Agreement below.\n\n")
        f.write(copyright_text.replace("|release|", "3.11"))
        f.write("\n\n")
        f.write(text[start:end].replace("|release|", "3.11").replace(".. code-block:: none", "").rstrip() + "\n")
    print(f"{len(kept)} paragraphs, {sum(len(p) + 1 for p in kept)} bytes")


if __name__ == "__main__":
    main()
