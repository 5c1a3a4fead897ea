"""The layering of docs/ARCHITECTURE.md holds: a module imports only its own layer or the
layers below it, the stores never import one another, and no imports go round in a loop,
between packages or between the modules of one package. Every import counts, the ones inside
functions and under TYPE_CHECKING too: a lazy import is still a dependency, and one made lazy
to dodge a loop is still the loop."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

ENTRY, SURFACES, SERVICE, DOMAIN, STORES, BASE = 6, 5, 4, 3, 2, 1
LAYER_NAMES = {ENTRY: "entry", SURFACES: "surfaces", SERVICE: "service", DOMAIN: "domain",
               STORES: "stores", BASE: "base"}  # fmt: skip
# The most specific prefix wins. A new module must be placed here (the test says so).
LAYERS: dict[str, int] = {
    # entry: the `memoryd` console script and `python -m memoryd`: the hooks, else the CLI
    "memoryd.entry": ENTRY,
    "memoryd.__main__": ENTRY,
    # surfaces: what users and agents talk to
    "memoryd": SURFACES,  # the package itself: `memoryd.open`, `memoryd.connect`
    "memoryd.cli": SURFACES,
    "memoryd.api": SURFACES,
    "memoryd.mcp": SURFACES,
    "memoryd.interop": SURFACES,
    "memoryd.notebook": SURFACES,
    "memoryd.capture": SURFACES,
    "memoryd.setup": SURFACES,
    "memoryd.demo": SURFACES,
    "memoryd.daemon": SURFACES,  # the process that hosts the api and mcp surfaces
    "memoryd.team_server": SURFACES,  # the team server: the daemon's app behind the gate
    "memoryd.team_member": SURFACES,  # a developer daemon in a team: link, forward, outbox, share
    # service: the one MemoryAPI, in process and over the socket, and its composition
    "memoryd.protocol": SERVICE,
    "memoryd.service": SERVICE,
    "memoryd.wiring": SERVICE,
    "memoryd.doctor": SERVICE,
    "memoryd.client": SERVICE,  # the daemon's client: RemoteService over the socket
    "memoryd.context": SERVICE,  # inject's choice of memories, over any MemoryAPI
    # domain: the jobs the service wires together
    "memoryd.domain": DOMAIN,
    "memoryd.recall": DOMAIN,
    "memoryd.extraction": DOMAIN,
    "memoryd.enrichment": DOMAIN,
    "memoryd.llm": DOMAIN,
    "memoryd.inbox": DOMAIN,
    "memoryd.journal": DOMAIN,
    "memoryd.governance": DOMAIN,
    "memoryd.sync": DOMAIN,
    "memoryd.team": DOMAIN,  # team users, tokens, grants, the gate
    # stores: each owns its files and never imports another
    "memoryd.vault": STORES,
    "memoryd.graph": STORES,
    "memoryd.search": STORES,
    "memoryd.governance.store": STORES,
    "memoryd.audit": STORES,
    # the vault's encrypted files and the scope keys: built on the vault's file format, so
    # it may use the vault (it is not one of STORES_BY_NAME), and no other store uses it
    "memoryd.sensitive": STORES,
    # base: values, errors, settings, and stdlib helpers the capture hook shares
    "memoryd.models": BASE,
    "memoryd.errors": BASE,
    "memoryd.config": BASE,
    "memoryd.scope": BASE,
    "memoryd.text": BASE,
    "memoryd.jsondepth": BASE,
    "memoryd.private": BASE,
    "memoryd.bulkfiles": BASE,
    "memoryd.native": BASE,
    "memoryd.locking": BASE,
    "memoryd.filelock": BASE,
    "memoryd.keyrings": BASE,  # which keyring backends may keep a secret (keyring is lazy)
    "memoryd.memfile": BASE,
    "memoryd.capture_limits": BASE,
    "memoryd.redact": BASE,
    "memoryd.daemon_files": BASE,
    "memoryd.autostart": BASE,  # stdlib: the hooks start the daemon with it
    # a session, its hook-event journal and its summary: stdlib, shared by the hook and the
    # service, which assembles a sensitive scope's session from its sealed journal
    "memoryd.sessions": BASE,
}
STORES_BY_NAME = ("memoryd.vault", "memoryd.graph", "memoryd.search", "memoryd.governance.store",
                  "memoryd.audit")  # fmt: skip
BASE_NAMES_OF_THE_PACKAGE = {"__version__"}
"""`from memoryd import __version__` reads a constant, not the package's entry points."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def owner(name: str, table: dict[str, int] | tuple[str, ...]) -> str | None:
    best = None
    for prefix in table:
        if (name == prefix or name.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return best


def imports(module: str) -> list[tuple[int, str]]:
    """(line, imported memoryd module) for every import in `module`."""
    return list(_imports_of(module))


@functools.cache
def _imports_of(module: str) -> tuple[tuple[int, str], ...]:
    """Each module is parsed once per run: every check here walks all of them."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("memoryd")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memoryd"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in MODULES:
                    found.append((node.lineno, sub))
                elif node.module == "memoryd" and alias.name in BASE_NAMES_OF_THE_PACKAGE:
                    continue
                else:
                    found.append((node.lineno, node.module))
    return tuple(found)


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if owner(m, LAYERS) is None]
    assert unplaced == [], "add these to LAYERS in tests/unit/test_layers.py"


def violations() -> list[str]:
    found = []
    for module in MODULES:
        mine = LAYERS[owner(module, LAYERS) or "memoryd"]
        my_store = owner(module, STORES_BY_NAME)
        for line, target in imports(module):
            theirs = LAYERS[owner(target, LAYERS) or "memoryd"]
            where = f"{MODULES[module].relative_to(SRC)}:{line} imports {target}"
            if theirs > mine:
                found.append(f"{where} ({LAYER_NAMES[mine]} -> {LAYER_NAMES[theirs]})")
            their_store = owner(target, STORES_BY_NAME)
            if my_store and their_store and my_store != their_store:
                found.append(f"{where} (store -> another store)")
    return found


def test_no_module_imports_a_higher_layer_or_another_store() -> None:
    assert violations() == []


def one_more_import(monkeypatch: pytest.MonkeyPatch, module: str, target: str) -> None:
    """For the rest of a test, `module` also imports `target` (the checks catch it)."""
    real = imports

    def with_one_more(name: str) -> list[tuple[int, str]]:
        return real(name) + ([(1, target)] if name == module else [])

    monkeypatch.setitem(globals(), "imports", with_one_more)


@pytest.mark.parametrize(
    ("module", "target", "broken"),
    [
        ("memoryd.vault", "memoryd.graph.store", "store -> another store"),
        ("memoryd.config", "memoryd.capture.hook", "base -> surfaces"),
        ("memoryd.service", "memoryd.api.routes", "service -> surfaces"),
        ("memoryd.cli.main", "memoryd.entry", "surfaces -> entry"),
        ("memoryd.capture.hook", "memoryd.__main__", "surfaces -> entry"),
    ],
)
def test_the_check_catches_a_bad_import(
    module: str, target: str, broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_more_import(monkeypatch, module, target)
    assert any(broken in v and target in v for v in violations())


def layer_unit(module: str) -> str:
    """A module's unit in LAYERS: its package, or the module when it is placed on its own."""
    return owner(module, LAYERS) or "memoryd"


def directory(module: str) -> str:
    """A module's directory under memoryd (`memoryd.capture.hook` -> `memoryd.capture`, its
    subpackages included), or the module itself when it sits in memoryd's own directory."""
    return ".".join(module.split(".")[:2])


def unit_cycles(unit_of: Callable[[str], str] = layer_unit) -> list[list[str]]:
    """Cycles between units: by default the LAYERS entries (packages, or modules placed on
    their own); with `directory`, memoryd's packages as directories."""
    edges: dict[str, set[str]] = {}
    for module in MODULES:
        mine = unit_of(module)
        for _, target in imports(module):
            theirs = unit_of(target)
            if theirs != mine:
                edges.setdefault(mine, set()).add(theirs)
    cycles: list[list[str]] = []

    def walk(unit: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(unit, ())):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least unit
                walk(nxt, [*path, nxt])

    for start in sorted(edges):
        walk(start, [start])
    return cycles


def test_no_import_cycles_between_packages() -> None:
    assert unit_cycles() == []


def test_no_import_cycles_between_directories() -> None:
    """A package is read as its directory, whatever its modules' floors: `capture/` and
    `daemon/` once held base and service modules beside their surfaces, and the directories
    went round (capture -> domain -> capture, daemon -> service -> daemon). A module that
    belongs to another floor lives in a package of that floor (`sessions/`, `client/`)."""
    assert unit_cycles(directory) == []


@pytest.mark.parametrize(
    ("module", "target"),
    [
        # downward for the layers (daemon and team_member are both surfaces), but
        # team_server/server.py imports the daemon: the directories would go round
        ("memoryd.daemon.server", "memoryd.team_server.routes"),
        ("memoryd.recall.conversation", "memoryd.capture.hook"),  # what sessions/ fixed
    ],
)
def test_the_check_catches_a_loop_between_directories(
    module: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_more_import(monkeypatch, module, target)
    assert any({directory(module), directory(target)} <= set(c) for c in unit_cycles(directory))


def test_a_module_placed_on_its_own_sits_on_another_floor() -> None:
    """A LAYERS entry for a module inside a package makes it a unit of its own, which the
    package loop check sees apart from its package: that is only for a module on another floor
    than its package (the stores of `governance/store/`), never a way around a loop
    (`capture/fastpath.py` importing the CLI from inside `capture/` was one)."""
    same_floor = [
        name
        for name in LAYERS
        if name.count(".") > 1  # inside a package of memoryd, not memoryd's own modules
        and (parent := owner(name.rsplit(".", 1)[0], LAYERS)) is not None
        and LAYERS[parent] == LAYERS[name]
    ]
    assert same_floor == []


def module_cycles() -> list[list[str]]:
    """The import loops between single modules: each strongly connected component of the
    import graph with more than one module, sorted. A package's `__init__` is a module here
    (`from memoryd.recall import X` reads it), so a module importing its own package's names
    while the package imports it is a loop too."""
    edges = {m: sorted({t for _, t in imports(m) if t in MODULES and t != m}) for m in MODULES}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                loops.append(sorted(component))

    for module in sorted(MODULES):
        if module not in order:
            visit(module)
    return sorted(loops)


def test_no_import_cycles_between_modules() -> None:
    assert module_cycles() == []


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("memoryd.cli.options", "memoryd.cli.main"),  # a command group's helpers from main
        ("memoryd.extraction.linking", "memoryd.extraction.pipeline"),
        ("memoryd.recall.candidates", "memoryd.recall.fusion"),  # through conversation
        ("memoryd.search.sessions", "memoryd.search.index"),
        ("memoryd.recall.pipeline", "memoryd.recall"),  # a package's names into its module
    ],
)
def test_the_check_catches_a_loop_between_modules(
    module: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_more_import(monkeypatch, module, target)
    assert any({module, target} <= set(loop) for loop in module_cycles())


LONG_MODULE = 600
MODULE_CAP = 800


def test_a_long_module_says_why_at_its_top() -> None:
    """A module past ~600 lines is a smell unless its docstring gives the reason."""
    unexplained = []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > LONG_MODULE:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if f"Over {LONG_MODULE} lines:" not in doc:
                unexplained.append(module)
    assert unexplained == []


def test_no_module_is_past_the_cap() -> None:
    """Past 800 lines a module holds more than one job, whatever its docstring says: split it."""
    long = {
        m: n
        for m, p in MODULES.items()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MODULE_CAP
    }
    assert long == {}
