"""The architecture's rules, read off the source (``docs/development.md``, "Rules the tests
keep"): which layer may import which, and how long a module may grow. Every import counts,
also one inside a function or under ``TYPE_CHECKING``.

A rule the tree breaks today is listed in ``PENDING`` with its offending imports and runs as a
strict xfail: the restructure that fixes it turns the xfail into a failure, which asks for the
rule to leave ``PENDING`` and be enforced from then on."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ADAPTERS = ("rota.stores", "rota.brokers", "rota.coordination", "rota.indexes", "rota.redis")
ENTRY_POINTS = ("rota.api", "rota.dashboard", "rota.client", "rota.cli", "rota.worker")
ROOT = ("rota.app",)
OBSERVABILITY = ("rota.observability",)
SDK = ("rota.sdk",)
BUILTIN = ("rota.builtin",)
OUTSIDE_THE_ROOT = ("rota.core", "rota.services", "rota.sdk", "rota.observability", "rota.demo")
OUTSIDE_THE_ROOT += BUILTIN
OUTSIDE_THE_ROOT += ENTRY_POINTS

# name -> (the modules it governs, the imports they may not make, exceptions to those)
RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "core imports only core": (("rota.core",), ("rota",), ("rota.core",)),
    "services import no adapter": (("rota.services",), ADAPTERS, ()),
    "services import no entry point": (("rota.services",), ENTRY_POINTS, ()),
    "services import no observability": (("rota.services",), OBSERVABILITY, ()),
    "services import no settings or wiring": (("rota.services",), ROOT, ()),
    "adapters import no service, entry point or wiring": (
        ADAPTERS,
        ("rota.services", *ENTRY_POINTS, *ROOT),
        (),
    ),
    # The worker's local outbox and the CLI's user commands reach files and stores too; the
    # file-mode helpers are plumbing, and the CLI goes through rota.app.adapters.
    "only the composition root imports adapters": (
        OUTSIDE_THE_ROOT,
        ADAPTERS,
        ("rota.stores.files",),
    ),
    "entry points take only settings from the root": (
        ("rota.api", "rota.dashboard", "rota.client", "rota.sdk"),
        ROOT,
        ("rota.app.settings",),
    ),
    "services take a store slice, not the whole Store": (
        ("rota.services",),
        ("rota.core.ports.Store", "rota.core.ports.store.Store"),
        (),
    ),
    "the sdk imports only core": (SDK, ("rota",), ("rota.core", *SDK)),
    # The built-in workers are job handlers like a user's, plus the services they run (the
    # retention sweep); their settings and stores are given by the composition root.
    "the built-in workers import only core, sdk and services": (
        BUILTIN,
        ("rota",),
        ("rota.core", *SDK, "rota.services", *BUILTIN),
    ),
    "the client imports only the api schemas and core": (
        ("rota.client",),
        ("rota",),
        ("rota.core", "rota.client", "rota.api.schemas"),
    ),
    # The operator's commands are a client of a server: no settings, service or store.
    "the operator's CLI commands talk to a server only through the client": (
        ("rota.cli.ops",),
        ("rota",),
        ("rota.client", "rota.cli.ops", "rota.api.schemas", "rota.core"),
    ),
    "the dashboard imports no api route": (("rota.dashboard",), ("rota.api.routes*",), ()),
    "the worker runtime imports no wiring or server": (
        ("rota.worker",),
        (*ROOT, "rota.api", "rota.dashboard", "rota.cli"),
        (),
    ),
}

# Broken today (the restructure, issue 15, fixes each); the offending imports as of this commit.
PENDING: set[str] = set()


BENCH = "rota_bench"
"""The benchmarks (``rota bench``): a package beside the product, in the same distribution."""
BENCH_ONLY = ("rota_bench", "psutil")
"""What the product never imports: the benchmarks, and psutil (the ``bench`` extra's)."""


def test_the_product_imports_no_benchmark_and_no_psutil() -> None:
    """``rota bench`` plugs into the ``rota`` command through an entry point; psutil is no
    runtime dependency (issue 34). Any import counts, also one inside a function."""
    found = []
    for path in sorted((SRC / "rota").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(SRC)} -> {n}" for n in names if matches(n, BENCH_ONLY)]
    assert found == []


def test_no_loose_modules_at_the_package_root() -> None:
    """Every part lives in a package that names its layer (docs/development.md)."""
    loose = sorted(p.name for p in (SRC / "rota").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]


def matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch(name, p) or fnmatch(name, f"{p}.*") for p in patterns)


def imports() -> dict[str, set[str]]:
    """Module -> every ``rota…`` name it imports (``from m import x`` gives ``m`` and ``m.x``)."""
    found: dict[str, set[str]] = {}
    for path in sorted((SRC / "rota").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = parts[:-1]
        names = found.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                origin = ".".join([*base, *([node.module] if node.module else [])])
                names.add(origin)
                names.update(f"{origin}.{alias.name}" for alias in node.names)
    return {m: {n for n in names if matches(n, ("rota",))} for m, names in found.items()}


@pytest.fixture(scope="module")
def imported() -> dict[str, set[str]]:
    return imports()


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="pending"))
        if r in PENDING
        else r
        for r in RULES
    ],
)
def test_layering(rule: str, imported: dict[str, set[str]]) -> None:
    sources, forbidden, allowed = RULES[rule]
    broken = sorted(
        f"{module} -> {name}"
        for module, names in imported.items()
        if matches(module, sources)
        for name in names
        if matches(name, forbidden) and not matches(name, allowed)
    )
    assert broken == [], f"{rule}: " + ", ".join(broken)


ADAPTER_FACTORY = "rota.app.adapters"
"""Where adapters are picked (by the settings' URLs) and built."""


def test_within_the_root_only_the_adapter_factory_builds_adapters(
    imported: dict[str, set[str]],
) -> None:
    """The wiring, the server and the worker process get their adapters from
    :data:`ADAPTER_FACTORY`, as the CLI's operator commands do (outside the root, the rule
    "only the composition root imports adapters" holds); the file-mode helpers are plumbing."""
    broken = sorted(
        f"{module} -> {name}"
        for module, names in imported.items()
        if matches(module, ROOT) and module != ADAPTER_FACTORY
        for name in names
        if matches(name, ADAPTERS) and not matches(name, ("rota.stores.files",))
    )
    assert broken == []


def test_every_pending_rule_is_a_rule() -> None:
    assert set(RULES) >= PENDING
    assert set(HEAVY) >= LIGHT_PENDING


# `import rota` (the SDK and the client) loads none of the server's parts. Its cost (issue 15:
# under 0.2 s; about 0.15 s today, most of it pydantic for JobData, the client loading on first
# use) is not checked here: a time on two shared cores is noise.
HEAVY = ("fastapi", "sqlalchemy", "uvicorn", "pydantic_settings")
HEAVY += ("rota.services", "rota.stores", "rota.app", "rota.api.routes", "rota.worker")
HEAVY += ("rota.builtin",)
# Parts still loaded by `import rota` (none today), each a strict xfail until it is not.
LIGHT_PENDING: set[str] = set()


@pytest.fixture(scope="module")
def loaded_by_import_rota() -> list[str]:
    code = "import json, sys, rota; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


@pytest.mark.parametrize(
    "heavy",
    [
        pytest.param(m, marks=pytest.mark.xfail(strict=True, reason="pending"))
        if m in LIGHT_PENDING
        else m
        for m in HEAVY
    ],
)
def test_importing_rota_loads_no_server_part(heavy: str, loaded_by_import_rota: list[str]) -> None:
    assert [m for m in loaded_by_import_rota if matches(m, (heavy,))] == []


MAX_LINES = 800
PACKAGE_MAX_LINES = 500  # the adapters split into packages by area
SPLIT_PACKAGES = ("rota/stores/sql/", "rota/brokers/rabbitmq/")


def _in_split_package(path: str) -> bool:
    return path.startswith(SPLIT_PACKAGES)


# Today's longer modules, each capped at its current length: none may grow, and each leaves
# the list once it is within MAX_LINES.
TOO_LONG: dict[str, int] = {}


def test_no_module_grows_past_its_limit() -> None:
    lengths = {
        p.relative_to(SRC).as_posix(): len(p.read_text().splitlines())
        for package in ("rota", BENCH)
        for p in (SRC / package).rglob("*.py")
    }
    limits = {
        path: TOO_LONG.get(path, PACKAGE_MAX_LINES if _in_split_package(path) else MAX_LINES)
        for path in lengths
    }
    assert {p: n for p, n in lengths.items() if n > limits[p]} == {}
    stale = {p for p in TOO_LONG if lengths.get(p, 0) <= MAX_LINES}
    assert stale == set(), "within the limit now (or gone): take them off TOO_LONG"


# Every port is small enough to read (issue 15): at most 15 abstract methods. ``Store`` and
# ``Coordination`` are the composites of their slices (what an adapter implements); only the
# methods they declare themselves count for them.
MAX_ABSTRACT_METHODS = 15
COMPOSITES = {"Store", "Coordination", "DependencyAwareStore"}


def test_no_port_has_more_than_15_abstract_methods() -> None:
    from rota.core import ports

    sizes = {}
    for name in ports.__all__:
        port = getattr(ports, name)
        abstract = port.__abstractmethods__
        if name in COMPOSITES:
            abstract = {m for m in abstract if m in vars(port)}
        sizes[name] = len(abstract)
    assert {n: s for n, s in sizes.items() if s > MAX_ABSTRACT_METHODS} == {}
    assert set(COMPOSITES) <= set(sizes)
