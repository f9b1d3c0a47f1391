"""Finding job types: import modules (by dotted name or file path) and collect the
:class:`~rota.sdk.job.JobDefinition` objects they hold. There is no global registry."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from rota.core.errors import ConfigurationError
from rota.core.models import JsonValue
from rota.sdk.job import JobDefinition

__all__ = ["AnyJobDefinition", "JobRegistry", "load_jobs"]

AnyJobDefinition = JobDefinition[..., Any]


class JobRegistry(Mapping[str, AnyJobDefinition]):
    """Job type name -> definition. Two different definitions of one name are refused."""

    def __init__(self, definitions: Iterable[AnyJobDefinition] = ()) -> None:
        self._definitions: dict[str, AnyJobDefinition] = {}
        self._origins: dict[str, str] = {}
        for definition in definitions:
            self.add(definition)

    def add(self, definition: AnyJobDefinition, *, origin: str | None = None) -> None:
        """Add a definition (the same object again is a no-op). Resolves its data type now so
        a bad annotation fails at load time; raises ``ConfigurationError`` on a duplicate."""
        name = definition.name
        where = origin or f"{definition.func.__module__}.{definition.func.__qualname__}"
        existing = self._definitions.get(name)
        if existing is definition:
            return
        if existing is not None:
            raise ConfigurationError(
                f"job type {name!r} is defined twice: by {self._origins[name]} and by {where}; "
                "job type names must be unique within a worker"
            )
        try:
            definition.data_type  # noqa: B018 - resolves forward references now
        except NameError as exc:
            raise ConfigurationError(
                f"cannot resolve the data annotation of job type {name!r} ({where}): {exc}"
            ) from exc
        self._definitions[name] = definition
        self._origins[name] = where

    def __getitem__(self, name: str) -> AnyJobDefinition:
        return self._definitions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._definitions)

    def __len__(self) -> int:
        return len(self._definitions)

    def __repr__(self) -> str:
        return f"JobRegistry({sorted(self._definitions)})"

    def describe(self) -> dict[str, dict[str, JsonValue]]:
        """Job type -> description, as a worker registers them (``WorkerInfo.job_types``)."""
        return {name: d.describe() for name, d in self._definitions.items()}


def _is_path(name: str) -> bool:
    return name.endswith(".py") or "/" in name or "\\" in name


def _import_path(name: str) -> ModuleType:
    path = Path(name).resolve()
    if not path.is_file():
        raise ConfigurationError(f"cannot load jobs from {name!r}: no such file")
    module_name = path.stem
    existing = sys.modules.get(module_name)
    if existing is not None:
        if getattr(existing, "__file__", None) and Path(existing.__file__ or "").resolve() == path:
            return existing
        raise ConfigurationError(
            f"cannot load jobs from {name!r}: a different module named {module_name!r} is "
            "already imported; rename the file or import it by its dotted name"
        )
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot load jobs from {name!r}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _import(name: str) -> ModuleType:
    try:
        return _import_path(name) if _is_path(name) else importlib.import_module(name)
    except ConfigurationError:
        raise
    except Exception as exc:
        raise ConfigurationError(
            f"cannot import jobs module {name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _modules(module: ModuleType) -> Iterator[ModuleType]:
    """The module and, for a package, all its submodules."""
    yield module
    for info in pkgutil.walk_packages(getattr(module, "__path__", ()), f"{module.__name__}."):
        yield _import(info.name)


def load_jobs(module_names: Sequence[str]) -> JobRegistry:
    """Import the named modules (dotted names, packages with their submodules, or ``.py`` file
    paths) and collect every job definition they hold at module level.

    Raises :class:`~rota.core.errors.ConfigurationError` when a module cannot be imported or
    two different definitions share a job type name.
    """
    registry = JobRegistry()
    for name in module_names:
        for module in _modules(_import(name)):
            for attr, value in vars(module).items():
                if isinstance(value, JobDefinition):
                    registry.add(value, origin=f"{module.__name__}.{attr}")
    return registry
