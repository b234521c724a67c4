"""Module boundaries: no module uses another module's underscore names, and trace_core
never imports nexus, textual or rich."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("trace_core", "nexus")
FORBIDDEN_IN_CORE = ("nexus", "textual", "rich")


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


DOCUMENTED = {"os._exit", "sys._getframe"}  # standard library API despite the underscore
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}  # public by the documentation's own words


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_names(tree: ast.AST) -> set[str]:
    """Underscore names a module defines itself: its functions, classes, assignments,
    attributes it sets (``self._x = …``), fields and parameters. A class's own
    ``self._x`` is never a reach-in."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if private(n)}


def reach_ins(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"imports {a.name} from {node.module}") for a in node.names if private(a.name)]
        elif (isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in own
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
              and ast.unparse(node) not in DOCUMENTED and node.attr not in NAMEDTUPLE_API):
            found.append((node.lineno, f"uses .{node.attr} of {ast.unparse(node.value)}"))
    return [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in sorted(found)]


# reach-ins still to remove (none: the Nexus ones went with issue 14 item 4)
NEXUS_PENDING: set[str] = set()


def test_no_module_uses_another_modules_private_names():
    problems = [p for package in PACKAGES for path in sources(package) for p in reach_ins(path)]
    unexplained = [p for p in problems if "{}: {}".format(p.split(":")[0], p.split(": ", 1)[1]) not in NEXUS_PENDING]
    assert unexplained == []


def test_the_check_catches_a_reach_in(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from trace_core.store import _blob\n\ndef f(tree):\n    return tree._exchanges\n")
    good = tmp_path / "good.py"
    good.write_text("class A:\n    def __init__(self):\n        self._x = 1\n\n    def same(self, other):\n"
                    "        return other._x\n")
    bad_found = [p.split(": ", 1)[1] for p in reach_ins_at(bad, tmp_path)]
    assert bad_found == ["imports _blob from trace_core.store", "uses ._exchanges of tree"]
    assert reach_ins_at(good, tmp_path) == []


def reach_ins_at(path: Path, root: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return reach_ins(path)
    finally:
        ROOT = saved


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_trace_core_never_imports_nexus_textual_or_rich():
    bad = {f"{p.relative_to(ROOT)} imports {m}" for p in sources("trace_core") for m in imported_modules(p)
           if m in FORBIDDEN_IN_CORE}
    assert bad == set()
    assert imported_modules(ROOT / "nexus" / "app.py") & {"textual"}  # the check reads real imports


def module_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the package modules it imports at import time (top
    level, relative imports); imports inside functions or ``TYPE_CHECKING`` are not run
    then and do not count."""
    graph: dict[str, set[str]] = {}
    for path in sources(package):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        if is_init:
            parts = parts[:-1]
        base = parts if is_init else parts[:-1]
        deps: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                pkg = base[: len(base) - (node.level - 1)]
                if node.module:
                    deps.add(".".join(pkg + [node.module]))
                else:
                    deps.update(".".join(pkg + [a.name]) for a in node.names)
        graph[".".join(parts)] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if v not in graph:
                continue
            if state.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif not state.get(v):
                visit(v, stack)
        stack.pop()
        state[u] = 2

    for u in sorted(graph):
        if not state.get(u):
            visit(u, [])
    return found


def test_trace_core_has_no_import_circle():
    graph = module_imports("trace_core")
    assert "trace_core.tree" not in graph["trace_core.persist"] | graph["trace_core.archive"]
    assert cycles(graph) == []
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]  # the check finds one
