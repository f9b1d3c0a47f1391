"""Built-in workers: job types Rota ships ready to run, so a team can schedule real work
without writing a worker (``docs/builtin-workers.md``).

========================  ===============  ==========================================
``--builtin`` name        job type         module
========================  ===============  ==========================================
``http``                  ``http.request``      :mod:`rota.builtin.http`
``sql``                   ``sql.execute``       :mod:`rota.builtin.sql`
``email``                 ``email.send``        :mod:`rota.builtin.email`
``maintenance``           ``rota.maintenance``  :mod:`rota.builtin.maintenance`
========================  ===============  ==========================================

Each module offers ``definitions(config…) -> list[JobDefinition]``: its job types as closures
over their settings section (:mod:`rota.builtin.config`), with no import-time state. The
composition root (``rota worker --builtin …``, ``rota dev --builtin …``) builds them from the
settings; naming a module (``rota worker rota.builtin.http``) does the same. This package
imports no adapter and no settings: what a worker needs is given to its factory."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rota.core.errors import ConfigurationError

__all__ = ["NAMES", "PACKAGE", "parse_names", "split_modules"]

NAMES = ("http", "sql", "email", "maintenance")
PACKAGE = "rota.builtin"


def parse_names(values: Iterable[str]) -> list[str]:
    """The built-in worker names in ``values`` (each may be comma-separated), in order, once
    each; ``ConfigurationError`` names an unknown one and lists the known."""
    names: list[str] = []
    for value in values:
        for name in (part.strip().lower() for part in value.split(",")):
            if not name:
                continue
            if name not in NAMES:
                raise ConfigurationError(
                    f"unknown built-in worker {name!r}; the built-in workers are "
                    + ", ".join(NAMES)
                )
            if name not in names:
                names.append(name)
    return names


def split_modules(modules: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(built-in names, the other modules)``: ``rota.builtin.http`` given as a jobs module
    names the built-in worker ``http``."""
    builtin: list[str] = []
    others: list[str] = []
    for module in modules:
        if module == PACKAGE or module.startswith(f"{PACKAGE}."):
            name = module.removeprefix(PACKAGE).removeprefix(".")
            if not name:
                raise ConfigurationError(
                    f"name the built-in workers: {', '.join(f'{PACKAGE}.{n}' for n in NAMES)}"
                )
            builtin.extend(parse_names([name]))
        else:
            others.append(module)
    return builtin, others
