#!/usr/bin/env python3
"""Checks the layering of the workspace that cargo cannot check by itself.

Cargo already refuses a cycle between crates. Inside a crate it allows
anything, so this script reads every crate's `src/` and fails when:

1. its top-level modules reach each other in a cycle: module `a` names
   module `b` (`crate::b`, `super::b` from a top-level file, a doc link
   included: a link is a dependency a reader follows) and `b`, directly or
   not, names `a`;
2. a crate that is not allowed `unsafe` lacks `#![forbid(unsafe_code)]` at
   its root (`ALLOWED_UNSAFE` below lists the crates that need a syscall or
   measured SIMD, and why).

It prints each crate's modules in layers, bottom first, so the order can
be read off (`docs/ARCHITECTURE.md` explains it). Tests (`#[cfg(test)]`
modules in their own files: `tests.rs`, `tests/`) are left out: a test may
use anything.

    python3 scripts/check-layers.py            # every crate of the workspace
    python3 scripts/check-layers.py --files    # also file-level cycles
"""

import argparse
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Crates whose root may allow `unsafe`, each for a reason named in its code.
ALLOWED_UNSAFE = {
    "tlc-codec": "AVX2 kernels of 3LC's quantizer, measured (codec/benches)",
    "tlc-proxy": "getsockopt(SO_ORIGINAL_DST), malloc_trim and mallopt",
}

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)::\{([^}]*)\}", re.S)


def members():
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
    for member in workspace["workspace"]["members"]:
        manifest = tomllib.loads((ROOT / member / "Cargo.toml").read_text())
        yield manifest["package"]["name"], ROOT / member


def module_path(src, file):
    """`a::b` for src/a/b.rs or src/a/b/mod.rs; [] for lib.rs and main.rs."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
        parts = parts[:-1]
    return parts


def is_test(src, file):
    parts = file.relative_to(src).parts
    return "tests" in parts[:-1] or file.name == "tests.rs" or file.stem.endswith("_tests")


def strip_strings(text):
    """Text without string literals, so a path in a message is no edge."""
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def references(text):
    """Every `crate::a::b`, `super::x`, `self::y` path, group members included,
    with where it starts."""
    for match in GROUP.finditer(text):
        for item in match.group(2).split(","):
            item = item.strip()
            if item and item != "self":
                yield match.group(1), item.split("::"), match.start()
    for match in PATH.finditer(text):
        yield match.group(1), match.group(2).strip(":").split("::"), match.start()


def resolve(kind, rest, here):
    """The absolute module path a reference from module `here` names."""
    if kind == "crate":
        return rest
    base = list(here)
    if kind == "super":
        base = base[:-1]
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
    return base + rest


def root_exports(root_text):
    """Names the crate root re-exports, each with the module it comes from
    (`pub use a::{B, C};` gives B and C from `a`)."""
    found = {}
    for match in re.finditer(r"pub use (?:crate::|self::)?([a-z_][a-z0-9_]*)::([^;]+);", root_text):
        module, rest = match.group(1), match.group(2)
        for item in re.split(r"[{},\s]+", rest):
            item = item.split(" as ")[-1].split("::")[-1].strip()
            if item:
                found[item] = module
    return found


def local_exports(exports, top):
    """The root's re-exports of its own modules (not of other crates')."""
    return {name: module for name, module in exports.items() if module in top}


def crate_graph(src, level):
    """Edges between the crate's modules cut at `level` path components
    (1: top-level modules), with the first place each edge is seen. The
    crate root is a node of its own, `(root)`, for the items it defines
    itself: a module that uses one imports its way back up."""
    files = [f for f in sorted(src.rglob("*.rs")) if not is_test(src, f)]
    top = {module_path(src, f)[0] for f in files if module_path(src, f)}
    nodes = {tuple(module_path(src, f)[:level]) for f in files}
    exports = {}
    for file in files:
        if not module_path(src, file):
            exports.update(root_exports(strip_strings(file.read_text())))
    exports = local_exports(exports, top)
    edges = {}
    for file in files:
        here = module_path(src, file)
        text = strip_strings(file.read_text())
        # `#[cfg(test)] mod tests { ... }` blocks at the end of a file.
        cut = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", text)
        if cut:
            text = text[: cut.start()]
        source = tuple(here[:level])
        if not here:
            # The root declares every top-level module: it sits above them.
            for declared in re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;", text, re.M):
                edges.setdefault(((), (declared,)[:level]), f"{file.relative_to(ROOT)}")
        for kind, rest, at in references(text):
            target = resolve(kind, rest, here)
            if not target:
                continue
            if target[0] not in top:
                if target[0] in exports:
                    target = [exports[target[0]]] + target[1:]
                elif target[0][:1].isupper() or target[0].isupper():
                    target = []  # an item the root defines itself
                else:
                    continue
            # The longest known module prefix of the path.
            node = tuple(target[:level])
            while node and node not in nodes:
                node = node[:-1]
            if node != source and not (len(node) < len(source) and source[: len(node)] == node) or (
                node == () and source != ()
            ):
                line = text[:at].count("\n") + 1
                edges.setdefault((source, node), f"{file.relative_to(ROOT)}:{line}")
    return nodes, edges


def cycles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    graph = {n: [] for n in nodes}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layers(nodes, edges):
    """Nodes by floor: 0 imports nothing of the crate, n imports floor < n."""
    floor = {}
    remaining = set(nodes)
    while remaining:
        ready = {
            n
            for n in remaining
            if all(b in floor for (a, b) in edges if a == n and b in nodes)
        }
        if not ready:
            return None
        for n in ready:
            floor[n] = max([floor[b] + 1 for (a, b) in edges if a == n and b in floor], default=0)
        remaining -= ready
    return floor


def name(node):
    return "::".join(node) or "(root)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", action="store_true", help="also fail on cycles between files")
    args = parser.parse_args()
    failed = False
    for crate, path in members():
        src = path / "src"
        roots = [src / "lib.rs", src / "main.rs"] + sorted((src / "bin").glob("*.rs"))
        for root in [r for r in roots if r.exists()]:
            if crate not in ALLOWED_UNSAFE and "#![forbid(unsafe_code)]" not in root.read_text():
                print(f"{crate}: {root.relative_to(ROOT)} lacks #![forbid(unsafe_code)]")
                failed = True
        levels = [1, 99] if args.files else [1]
        for level in levels:
            nodes, edges = crate_graph(src, level)
            found = cycles(nodes, edges)
            for component in found:
                failed = True
                members_ = set(component)
                print(f"{crate}: cycle between {', '.join(name(n) for n in component)}:")
                for (a, b), where in sorted(edges.items()):
                    if a in members_ and b in members_:
                        print(f"    {name(a)} -> {name(b)}  ({where})")
            if level == 1 and not found:
                floor = layers(nodes, edges) or {}
                by_floor = {}
                for n, f in floor.items():
                    by_floor.setdefault(f, []).append(name(n))
                shown = " | ".join(
                    ", ".join(sorted(by_floor[f])) for f in sorted(by_floor)
                )
                print(f"{crate}: {shown or '(one module)'}")
    if failed:
        print("check-layers: FAIL")
        return 1
    print("check-layers: ok: no module cycle in any crate; unsafe only where allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
