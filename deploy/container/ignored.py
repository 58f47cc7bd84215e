#!/usr/bin/env python3
"""Prints the paths, read one per line from stdin, that a .dockerignore
file (the argument) leaves out of a build context; exits 1 if it cannot be
read.

    git ls-files | deploy/container/ignored.py .dockerignore

The patterns are read as docker, podman and buildah read them: one per
line, `#` comments, paths from the context root, `*`, `?` and `**` globs,
a pattern matching a directory leaving out all below it, and `!` taking a
path back in (the last matching line wins)."""

import fnmatch
import re
import sys


def patterns(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            line = line.lstrip("!").strip().strip("/")
            if line.startswith("./"):
                line = line[2:]
            out.append((keep, line))
    return out


def to_regex(pattern):
    """`pattern` as a regex over a path and every directory above it."""
    parts = []
    for piece in re.split(r"(\*\*/?)", pattern):
        if piece.startswith("**"):
            parts.append(".*")
        else:
            parts.append(fnmatch.translate(piece)[4:-3].replace(".*", "[^/]*"))
    return re.compile("".join(parts) + r"(/.*)?\Z")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        rules = [(keep, to_regex(p)) for keep, p in patterns(sys.argv[1])]
    except OSError as err:
        print(err, file=sys.stderr)
        sys.exit(1)
    for path in sys.stdin.read().splitlines():
        left_out = False
        for keep, regex in rules:
            if regex.match(path):
                left_out = not keep
        if left_out:
            print(path)


if __name__ == "__main__":
    main()
