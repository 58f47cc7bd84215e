#!/usr/bin/env python3
"""Checks that every pointer to a section of the project's Markdown still
lands, Markdown links with an anchor (`[x](docs/LIMITS.md#known-limits)`)
and pointers in words (`docs/SAFETY.md, "Restarts, upgrades and crashes"`,
`README "Five minutes"`) in any tracked text file (code comments, alerts,
manifests, docs). Sections move between README and docs/; an alert that
sends on-call to a heading that is gone is found here, not at 3 a.m.

A pointer holds when the named file has a Markdown heading, or a bold lead
(`**Name**`), that starts with the quoted words (case ignored). A path is
read from the pointing file's directory, then from the repository root; a
bare `README` or `README.md` is the pointing file's directory's, else the
top-level one.

Usage: scripts/check-pointers.py [ROOT]; exit 1 with one line per broken
pointer.
"""

import os
import re
import subprocess
import sys

POINTER = re.compile(r'(?P<path>[A-Za-z0-9_./-]*README(?:\.md)?|[A-Za-z0-9_./-]+\.md),? "(?P<section>[^"\n]{3,80})"')
LINK = re.compile(r"\]\((?P<path>[A-Za-z0-9_./-]*\.md)?#(?P<anchor>[A-Za-z0-9_-]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$")
BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+)?\*\*(?P<text>[^*]+)\*\*")
BINARY = (".png", ".svg", ".json", ".pb", ".bin", ".gz", ".ico")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose(path):
    """The lines of a Markdown file outside fenced code."""
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_code = not in_code
            elif not in_code:
                yield line


def anchors(path):
    """The anchors of a Markdown file's headings."""
    return {slug(m.group("text")) for m in map(HEADING.match, prose(path)) if m}


def sections(path):
    """The headings and bold leads of a Markdown file, lower-cased."""
    found = []
    for line in prose(path):
        for pattern in (HEADING, BOLD_LEAD):
            m = pattern.match(line)
            if m:
                found.append(m.group("text").replace("`", "").strip().lower())
    return found


def target(root, pointing, path):
    """The file a pointer names, or None."""
    if path in ("README", "README.md"):
        for base in (os.path.dirname(os.path.join(root, pointing)), root):
            candidate = os.path.join(base, "README.md")
            if os.path.isfile(candidate):
                return candidate
        return None
    if not path.endswith(".md"):
        path += ".md"
    for base in (os.path.dirname(os.path.join(root, pointing)), root):
        candidate = os.path.normpath(os.path.join(base, path))
        if os.path.isfile(candidate):
            return candidate
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = subprocess.run(
        ["git", "-C", root, "ls-files"], check=True, capture_output=True, text=True
    ).stdout.split()
    cache = {}
    broken = []
    checked = 0
    for name in files:
        if name.endswith(BINARY) or name.startswith("deploy/bench/results/"):
            continue
        try:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for m in POINTER.finditer(line):
                checked += 1
                path, section = m.group("path"), m.group("section")
                file = target(root, name, path)
                if file is None:
                    broken.append(f"{name}:{number}: {path}: no such file")
                    continue
                if file not in cache:
                    cache[file] = sections(file)
                wanted = section.replace("`", "").strip().lower()
                if not any(s.startswith(wanted) for s in cache[file]):
                    shown = os.path.relpath(file, root)
                    broken.append(f'{name}:{number}: {shown} has no section "{section}"')
            if not name.endswith(".md"):
                continue
            for m in LINK.finditer(line):
                checked += 1
                path, anchor = m.group("path"), m.group("anchor")
                file = os.path.normpath(
                    os.path.join(root, os.path.dirname(name), path) if path else os.path.join(root, name)
                )
                if not os.path.isfile(file):
                    broken.append(f"{name}:{number}: {path}: no such file")
                    continue
                if ("#", file) not in cache:
                    cache[("#", file)] = anchors(file)
                if anchor not in cache[("#", file)]:
                    shown = os.path.relpath(file, root)
                    broken.append(f"{name}:{number}: {shown} has no heading #{anchor}")
    for line in broken:
        print(f"check-pointers: {line}")
    if broken:
        sys.exit(1)
    print(f"check-pointers: {checked} pointers to sections and anchors, all land")


if __name__ == "__main__":
    main()
