"""The layers point one way: errors <- world <- runtime <- cli; adapters plug into the
world, which never imports them; no import cycles; no private names across modules."""

from __future__ import annotations

import ast
import os
from collections import defaultdict

from checkout import SRC

PACKAGES = ("little_workflow", "fs_adapters")

# What each layer may import from the product (a prefix match on module names).
ALLOWED = {
    "little_workflow.errors": (),
    "little_workflow.world": ("little_workflow.errors", "little_workflow.world"),
    "fs_adapters": ("little_workflow.errors", "little_workflow.world", "fs_adapters"),
    "little_workflow.runtime": ("little_workflow.errors", "little_workflow.world",
                                "little_workflow.runtime", "fs_adapters"),
}


def product_modules() -> dict[str, str]:
    """module name -> file path"""
    out = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(SRC, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, SRC)[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    # Scanning a folder that holds no package would pass every rule below.
    assert set(PACKAGES) <= set(out), f"no {PACKAGES} under {SRC}"
    return out


def imports_of(module: str, path: str, modules: dict[str, str]) -> set[str]:
    """Product modules imported anywhere in the file (function-level imports included)."""
    tree = ast.parse(open(path).read())
    is_package = path.endswith("__init__.py")
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            # The longest product module the name refers to.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    modules = product_modules()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            # A package's __init__ re-exports its modules: importing the package is not
            # a dependency of those modules on each other.
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def without_package_inits(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges into a package's __init__ from inside that package are re-export plumbing:
    `from . import x` in a package init is not a dependency cycle of the modules."""
    inits = {m for m in g if os.path.basename(product_modules()[m]) == "__init__.py"}
    return {
        m: {d for d in deps if not (d in inits and m.startswith(d + "."))
            and not (m in inits and d.startswith(m + "."))}
        for m, deps in g.items()
    }


def test_no_import_cycles_between_product_files():
    found = cycles(without_package_inits(graph()))
    assert found == [], f"import cycles: {found}"


def test_layers_point_one_way():
    problems = []
    for module, deps in graph().items():
        layer = next((k for k in sorted(ALLOWED, key=len, reverse=True)
                      if module == k or module.startswith(k + ".")), None)
        if layer is None:
            continue  # cli, ops, testing, demo, the package root: may use every layer
        for dep in deps:
            if not any(dep == a or dep.startswith(a + ".") for a in ALLOWED[layer]):
                problems.append(f"{module} imports {dep}")
    assert problems == [], "\n".join(sorted(problems))


def test_the_world_never_imports_an_adapter_or_the_runtime():
    for module, deps in graph().items():
        if module.startswith("little_workflow.world"):
            assert not any(d.startswith(("fs_adapters", "little_workflow.runtime")) for d in deps), (
                module, deps)


# fsspec's own extension points (AbstractFileSystem), which our filesystems override and
# the world calls on any filesystem object: third-party interface, not our private names.
FSSPEC_INTERFACE = {"_strip_protocol", "_open", "_rm", "_join", "_parent"}


def private_definitions(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_private_names_used_across_modules():
    modules = product_modules()
    trees = {m: ast.parse(open(p).read()) for m, p in modules.items()}
    defined = {m: private_definitions(t) for m, t in trees.items()}
    owners: dict[str, set[str]] = defaultdict(set)
    for m, names in defined.items():
        for n in names:
            owners[n].add(m)
    problems = []
    for m, tree in trees.items():
        for node in ast.walk(tree):
            used = None
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        problems.append(f"{m} imports private {alias.name} from {node.module}")
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                target = node.value
                if isinstance(target, ast.Name) and target.id in ("self", "cls"):
                    continue
                used = node.attr
            if used and used.startswith("_") and not used.startswith("__") and used not in FSSPEC_INTERFACE:
                if used not in defined[m] and owners.get(used):
                    problems.append(f"{m} uses {used} of {sorted(owners[used])}")
    assert problems == [], "\n".join(sorted(set(problems)))


AGENT_FRAMEWORKS = ("langgraph", "langchain_core", "pydantic_ai", "little_workflow.ext")


def test_only_ext_imports_an_agent_framework():
    """LangGraph and Pydantic AI are extras: only little_workflow/ext/ may import them,
    and nothing outside ext imports ext (so `import little_workflow` never needs them)."""
    problems = []
    for module, path in product_modules().items():
        if module.startswith("little_workflow.ext"):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            problems += [f"{module} imports {n}" for n in names
                         if any(n == f or n.startswith(f + ".") for f in AGENT_FRAMEWORKS)]
    assert problems == [], problems


# The World's rooms behind its door (world/protocol.py): the append protocol, the shared
# storage state, the file catalogue, the publishers, the World's file base and the
# facade's own module. Code outside world/ holds a WorldLike and calls its methods; it
# never builds on these rooms (tests/test_typed_door.py checks the calls). Run deletion
# is not among them: it works on any World's files (FilesLike), so gc calls it.
BEHIND_THE_DOOR = ("append", "shared_state", "file_catalogue", "catalogue.files",
                   "catalogue.sqlite", "catalogue.tracker", "publish", "files", "core")


def test_code_outside_the_world_never_imports_the_rooms_behind_its_door():
    inside = {f"little_workflow.world.{room}" for room in BEHIND_THE_DOOR}
    problems = [f"{m} imports {d}" for m, deps in graph().items()
                if m.startswith(("little_workflow.runtime", "little_workflow.ops",
                                 "little_workflow.cli", "little_workflow.ext"))
                for d in deps if d in inside]
    assert problems == [], "\n".join(sorted(problems))


def test_the_words_and_the_door_stand_on_their_own():
    """The vocabulary imports nothing of ours; the door never imports what implements it
    (core.py, tracing.py), so every room can name the door without a cycle."""
    g = graph()
    assert g["little_workflow.world.vocabulary"] == set()
    assert not g["little_workflow.world.protocol"] & {"little_workflow.world.core",
                                                      "little_workflow.world.tracing"}
