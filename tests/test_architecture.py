"""The package's shape: each operation written once for both faces, imports in one
direction, a core without I/O, private members kept private."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "middleware"
MODULES = sorted(PACKAGE.rglob("*.py"))

# What the pure core may not import: files, processes, clock, randomness, network, threads, logging, Redis, litellm.
IO_MODULES = {"os", "sys", "io", "pathlib", "shutil", "tempfile", "subprocess", "socket", "time", "datetime", "random", "uuid",
              "asyncio", "threading", "logging", "urllib", "http", "redis", "fakeredis", "litellm", "tiktoken", "yaml",
              "structlog", "httpx", "starlette", "uvicorn", "click", "rich"}  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The modules ``path`` imports, anywhere in it (absolute names)."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            if node.module:  # `from . import llm` imports the submodule, not the package's __init__
                found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def units(path: Path) -> dict[str, str]:
    """Top-level classes and functions, and the methods of classes, by name, with their source."""
    source = path.read_text()
    tree = ast.parse(source)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = ast.get_source_segment(source, node) or ""
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{item.name}"] = ast.get_source_segment(source, item) or ""
    return found


def shared_lines(one: str, other: str) -> int:
    """Lines the two have in common once ``async``/``await`` are stripped (blank lines aside)."""

    def lines(text: str) -> Counter[str]:
        stripped = (re.sub(r"\b(async|await)\s+", "", line.strip()) for line in text.splitlines())
        return Counter(line for line in stripped if line)

    return sum((lines(one) & lines(other)).values())


def twin_pairs() -> list[tuple[str, str, int]]:
    everything: dict[str, str] = {}
    for path in MODULES:
        everything.update({f"{module_name(path)}:{name}": src for name, src in units(path).items()})
    pairs = []
    for key, source in everything.items():
        module, name = key.split(":")
        *owner, last = name.split(".")
        for twin in (f"Async{last}", f"a{last}"):
            other = everything.get(f"{module}:{'.'.join([*owner, twin])}")
            if other is not None:
                pairs.append((key, twin, shared_lines(source, other)))
    return pairs


def test_no_operation_is_written_twice_for_sync_and_async() -> None:
    """No X/AsyncX class or f/af function pair shares more than a dozen lines once
    async/await are stripped: each operation is written once, as a program."""
    pairs = twin_pairs()
    assert pairs, "the check found no pairs to compare"
    assert [(name, twin, shared) for name, twin, shared in pairs if shared > 12] == []


def test_the_twin_check_would_see_a_copy() -> None:
    """The measure counts a hand-written twin (so the test above can fail)."""
    sync = "def load(self, sid):\n    keys = self.keys(sid)\n    replies = self.run(keys)\n    return decode(replies)\n"
    assert shared_lines(sync, sync.replace("def load", "async def aload").replace("self.run", "await self.run")) == 3


def test_modules_import_in_one_direction() -> None:
    """The import graph of the package's modules (every import, local ones included; the
    re-exporting middleware/__init__.py aside) has no cycle."""
    names = {module_name(path): path for path in MODULES if module_name(path) != "middleware"}
    graph = {name: {other for other in imports(path) if other in names and other != name} for name, path in names.items()}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in stack:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in done:
                visit(nxt, [*stack, nxt], done)
        done.add(node)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name], done)
    assert cycles == []


def test_chat_and_manager_do_not_import_each_other_back() -> None:
    """manager imports chat; chat never imports manager."""
    assert "middleware.turn.chat" in imports(PACKAGE / "session" / "manager.py")
    assert not any(name.startswith("middleware.session.manager") for name in imports(PACKAGE / "turn" / "chat.py"))


MAX_LINES, MAX_METHODS = 500, 25


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_longer_than_a_few_screens(path: Path) -> None:
    """Modules hold one concept each: none over 500 lines."""
    assert len(path.read_text().splitlines()) <= MAX_LINES


def methods_of(tree: ast.AST) -> dict[str, int]:
    """Each class and how many methods (and properties) it defines."""
    return {node.name: sum(isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body)
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}  # fmt: skip


def test_no_class_has_more_than_25_methods() -> None:
    """A class that needs more is two objects (the engine is a façade over collaborators)."""
    crowded = {f"{path.name}:{name}": count for path in MODULES for name, count in methods_of(ast.parse(path.read_text())).items()
               if count > MAX_METHODS}  # fmt: skip
    assert crowded == {}
    assert methods_of(ast.parse("class A:\n" + "".join(f"    def m{i}(self): ...\n" for i in range(26)))) == {"A": 26}


def calls_of(path: Path, name: str) -> list[int]:
    """The lines where ``path`` calls a function or method named ``name``."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)]  # fmt: skip


def test_one_place_builds_a_usage_record() -> None:
    """Every entrance reports its calls to the usage sink: only it builds a record and writes the log."""
    builders = {str(path.relative_to(PACKAGE)) for path in MODULES if calls_of(path, "usage_record")}
    logs = {str(path.relative_to(PACKAGE)) for path in MODULES if calls_of(path, "UsageLog")}
    assert builders == logs == {"usage/sink.py"}


ENGINE = PACKAGE / "session" / "engine.py"


def facade() -> set[str]:
    """The engine's public methods and properties."""
    engine = next(node for node in ast.parse(ENGINE.read_text()).body if isinstance(node, ast.ClassDef) and node.name == "Engine")
    return {item.name for item in engine.body if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")}


def reaches(source: str, allowed: set[str]) -> list[str]:
    """Uses of an engine (``engine``, ``self.engine``, ``self._engine``) other than its façade's members."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        named = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else ""
        if named in {"engine", "_engine"} and node.attr not in allowed:
            found.append(f"{named}.{node.attr}")
    return found


def test_callers_use_only_the_engines_facade() -> None:
    """Outside the engine, nothing reaches through it: only its public methods are used."""
    allowed = facade()
    offenders = {str(path.relative_to(PACKAGE)): reaches(path.read_text(), allowed) for path in MODULES if path != ENGINE}
    assert {path: found for path, found in offenders.items() if found} == {}
    assert reaches("engine.config.tokens\nself._engine.composer.static_prefix\nengine.plan_turn()", allowed) == [
        "engine.config",
        "_engine.composer",
    ]


PURE = [*sorted((PACKAGE / "core").rglob("*.py")), PACKAGE / "turn" / "plan.py"]


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_core_does_no_io(path: Path) -> None:
    """Core modules (and the turn plan) import no file, clock, network, thread, Redis or
    litellm module, nothing of the shell, and open nothing."""
    found = imports(path)
    banned = sorted(name for name in found if name.split(".")[0] in IO_MODULES)
    shell = sorted(
        name for name in found if name.startswith("middleware.") and name.split(".")[1] not in {"core", "config", "exceptions"}
    )
    assert banned == [] and shell == []
    assert "open(" not in path.read_text()


def test_no_module_reaches_into_another_modules_private_members() -> None:
    """``obj._name`` appears only on self/cls or inside the module that defines the name."""
    offenders = []
    for path in MODULES:
        # Names the module defines: functions, classes, attributes set on self, class fields.
        defined = set(re.findall(r"^\s*(?:def|class)\s+(_\w+)|^\s*self\.(_\w+)\s*[:=]|^\s+(_\w+)\s*:", path.read_text(), re.M))
        own = {name for pair in defined for name in pair if name}
        for match in re.finditer(r"(?<![\w.])(\w+)\.(_[a-z]\w*)", path.read_text()):
            target, member = match.groups()
            if target in {"self", "cls"} or member in own or member in {"_fields", "_replace", "_asdict"}:
                continue
            offenders.append(f"{path.name}: {match.group(0)}")
    assert offenders == []
