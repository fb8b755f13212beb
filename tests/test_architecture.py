"""The layout is the architecture: these tests read the imports of ``gateway``,
``tools`` and ``agent`` (with grimp, ``TYPE_CHECKING`` imports included, since a
circle of types is still a circle) and fail on an import that runs against the
map in docs/architecture.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).parent.parent

#: every platform's package (gateway/platforms/<name>/): side by side, none importing another
PLATFORM_PACKAGES = sorted(f"gateway.platforms.{p.parent.name}"
                           for p in (ROOT / "gateway" / "platforms").glob("*/__init__.py"))

#: the layers, highest first: a module may import from its own layer and those below
#: it, never from one above. Several names on one line are side by side and may not
#: import each other (the three platforms).
LAYERS: list[list[str]] = [
    ["gateway.cli"],
    ["gateway.daemon"],
    ["gateway.systemd"],
    PLATFORM_PACKAGES,
    ["gateway.platforms"],
    ["agent"],
    ["tools"],
    ["gateway.messages"],
    ["gateway.approvals"],
    ["gateway.telemetry"],
    ["gateway.delivery"],
    ["gateway.contract"],
    ["gateway.inbound"],
    ["gateway.cluster"],
    ["gateway.sessions"],
    ["gateway.store"],
    ["gateway.formatting"],
    ["gateway.config"],
    ["gateway.machine"],
    ["gateway.words"],
    ["gateway.errors", "gateway.retry", "gateway.tracing"],
]

#: the one module that knows the runner's concrete class
COMPOSITION_ROOT = "gateway.daemon.assembly"


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("gateway", "tools", "agent", exclude_type_checking_imports=False)


def layer_of(module: str) -> tuple[int, str] | None:
    """The layer a module is in (the most specific name that holds it)."""
    best: tuple[int, str] | None = None
    for depth, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (
                    best is None or len(name) > len(best[1])):
                best = (depth, name)
    return best


def imports(graph: grimp.ImportGraph) -> Iterator[tuple[str, str, int]]:
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            (detail, *_) = graph.get_import_details(importer=importer, imported=imported) or [
                {"line_number": 0}]
            yield importer, imported, int(detail["line_number"])


def test_every_module_is_in_a_layer(graph: grimp.ImportGraph) -> None:
    loose = [m for m in sorted(graph.modules) if layer_of(m) is None
             and m not in ("gateway", "gateway.platforms")]
    assert not loose, "not on the map in docs/architecture.md:\n" + "\n".join(loose)


def test_no_import_runs_up_a_layer_or_across_to_a_sibling(graph: grimp.ImportGraph) -> None:
    wrong = []
    for importer, imported, line in imports(graph):
        a, b = layer_of(importer), layer_of(imported)
        if a is None or b is None or a == b:
            continue
        if b[0] < a[0] or (b[0] == a[0] and a[1] != b[1]):
            wrong.append(f"{importer}:{line} imports {imported} ({b[1]} is above {a[1]})"
                         if b[0] < a[0] else f"{importer}:{line} imports its sibling {imported}")
    assert not wrong, "\n".join(wrong)


def test_no_circle_of_imports_between_files(graph: grimp.ImportGraph) -> None:
    circles = [" -> ".join(c) for c in strongly_connected(graph) if len(c) > 1]
    assert not circles, "\n".join(circles)


def test_only_the_composition_root_names_the_runner_class() -> None:
    names = []
    for path in sorted((ROOT / "gateway").rglob("*.py")) + sorted(
            (ROOT / "tools").rglob("*.py")) + sorted((ROOT / "agent").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module in (COMPOSITION_ROOT, "gateway.messages.runner"):
            continue
        if re.search(r"\bGatewayRunner\b", path.read_text()):
            names.append(module)
    assert not names, "\n".join(names)


def test_no_test_double_ships_in_the_wheel() -> None:
    doubles = [p.relative_to(ROOT).as_posix() for p in (ROOT / "gateway").rglob("*.py")
               if re.search(r"^class \w*(Memory|Fake|Stub|Mock)\w*\b", p.read_text(), re.M)]
    assert not doubles, "\n".join(doubles)


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm over the file-to-file import graph."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
            out.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return out


def test_every_error_the_gateway_raises_on_purpose_is_a_homing_error(
        graph: grimp.ImportGraph) -> None:
    import importlib
    import inspect

    from gateway.errors import HomingError

    loose = []
    for module in sorted(m for m in graph.modules if not m.endswith(".__main__")):
        for name, value in vars(importlib.import_module(module)).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__ == module and not issubclass(value, HomingError)):
                loose.append(f"{module}.{name}")
    assert not loose, "\n".join(loose)


def test_the_map_in_the_docs_lists_the_layers_in_their_order() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```")[1]
    drawn = []
    for line in block.splitlines():
        # a layer's name starts at column 13; what follows it, or a line under it, says
        # what the layer holds
        found = re.match(r"((?:gateway/)?[a-z_]+)(?:/|\.py)\s", line[13:])
        if found:
            drawn.append(found.group(1).replace("/", "."))
    layered = [name for names in LAYERS for name in names
               if not name.startswith("gateway.platforms.")]
    assert drawn == layered
    on_disk = {p.parent.name for p in (ROOT / "gateway").glob("*/__init__.py")}
    assert on_disk == {n.split(".")[1] for n in layered if n.count(".") == 1
                       and not n.endswith((".errors", ".retry", ".tracing"))}


def test_no_module_passes_on_what_another_defines(graph: grimp.ImportGraph) -> None:
    """No re-export shims: a name is imported from the module that defines it."""
    import importlib
    import inspect

    shims = []
    for module in sorted(m for m in graph.modules if not m.endswith(".__main__")):
        loaded = importlib.import_module(module)
        for name in getattr(loaded, "__all__", ()):
            value = getattr(loaded, name)
            if ((inspect.isclass(value) or inspect.isfunction(value))
                    and value.__module__ != module):
                shims.append(f"{module}.{name} is {value.__module__}'s")
    assert not shims, "\n".join(shims)


def test_a_platform_is_named_outside_its_package_only_by_the_registry() -> None:
    """Adding a platform touches no file outside its own package but one line of the
    registry (gateway/config/registry.py), and a third-party one not even that: no other
    module of the gateway, its tools or its agent names a platform's package."""
    from gateway.config.registry import BUILT_IN

    named = re.compile(r"\bgateway[./]platforms[./](" + "|".join(
        p.rsplit(".", 1)[1] for p in PLATFORM_PACKAGES) + r")\b")
    outside = []
    for path in sorted((ROOT / "gateway").rglob("*.py")) + sorted(
            (ROOT / "tools").rglob("*.py")) + sorted((ROOT / "agent").rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[:2] == ("gateway", "platforms") and len(parts) > 3:
            continue  # inside a platform's package
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if named.search(line) and not any(f'"{ref}"' in line for ref in BUILT_IN):
                outside.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not outside, "\n".join(outside)
    assert sorted(ref.split(":")[0].rsplit(".", 1)[0] for ref in BUILT_IN) == \
        PLATFORM_PACKAGES
