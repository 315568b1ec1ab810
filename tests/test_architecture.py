"""The shape of the package, checked from its source: the rules the layout of the code keeps.

- no import cycle between modules (a module that needs one is in the wrong place);
- every storage access through ``ManagedStore``: nothing outside ``committer/store/`` reaches
  for a store's ``backend``;
- ``layout.py`` is the one place that names what lies under a destination and a job directory,
  and it does no I/O (imports no store);
- the job side's floors: the stages of the data path know nothing of durability.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("committer", "manifest_schema")

# Names of things under a destination or job directory, as string constants: only layout.py
# may spell them. (Plain words such as "tasks" or "manifests" are JSON keys elsewhere too, so
# only the names nothing else would be spelled like are checked.)
LAYOUT_NAMES = {
    "_temporary", "manifest_", "-manifest.json", "-manifest.json.tmp", "_SUCCESS",
    "_job.json", "_journal.json", "_SUCCESS.tmp", "_SUCCESS.previous", "_history.tmp",
    "replaced", "displaced", "_manifest_committer", "_manifest_committer/lock",
    "_manifest_committer/history", ".lease", "_custom_locations",
}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _tree(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text(encoding="utf-8"), str(MODULES[name]))


def _imports(name: str) -> Iterator[str]:
    """The project modules ``name`` imports, anywhere in it (functions included)."""
    is_package = MODULES[name].name == "__init__.py"
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module pkg.mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        for wanted in targets:
            module = wanted
            while module and module not in MODULES:
                module = module.rpartition(".")[0]
            if module and module != name:
                yield module


def _graph() -> dict[str, set[str]]:
    return {name: set(_imports(name)) for name in MODULES}


def test_no_import_cycles() -> None:
    graph = _graph()
    # A package's __init__ re-exporting its own submodules is not a cycle of the code's design.
    for name in graph:
        graph[name] = {t for t in graph[name] if not (t + ".").startswith(name + ".")
                       or MODULES[t].name != "__init__.py"}
        if MODULES[name].name == "__init__.py":
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_only_the_store_layer_touches_a_backend() -> None:
    found = []
    for name, path in MODULES.items():
        if name.startswith("committer.store"):
            continue
        for node in ast.walk(_tree(name)):
            if isinstance(node, ast.Attribute) and node.attr == "backend":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"store.backend used outside committer/store/: {found}"


def _string_constants(tree: ast.Module) -> Iterator[ast.Constant]:
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node


@pytest.mark.parametrize("package", ["committer.job", "committer.task", "committer.cli",
                                     "committer.spark", "committer.store"])
def test_names_under_the_job_directory_are_defined_once(package: str) -> None:
    found = []
    for name, path in MODULES.items():
        if not name.startswith(package):
            continue
        for const in _string_constants(_tree(name)):
            if const.value in LAYOUT_NAMES:
                found.append(f"{path.relative_to(ROOT)}:{const.lineno} {const.value!r}")
    assert not found, f"spelled outside committer/layout.py: {found}"


def test_layout_does_no_io() -> None:
    imported = set(_imports("committer.layout"))
    assert imported <= {"committer.errors", "manifest_schema.uris", "manifest_schema.errors",
                        "committer", "manifest_schema"}, imported


def test_stages_know_nothing_of_durability() -> None:
    for name in MODULES:
        if name.startswith("committer.job.stages"):
            bad = {t for t in _imports(name) if t.startswith(("committer.job.durability",
                                                              "committer.job.committer",
                                                              "committer.job.resume"))}
            assert not bad, f"{name} imports {bad}"
