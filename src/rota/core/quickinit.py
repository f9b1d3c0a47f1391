"""A faster ``__init__`` for the frozen, slotted, keyword-only dataclasses of the domain.

Python 3.11's dataclasses write each field of a frozen instance with
``object.__setattr__(self, name, value)``, which looks the method and then the field up
again for every field: 8–12 µs to build a :class:`~rota.core.models.Job` of 53 fields, a
tenth of a bulk create's server time per job (issue 19), and a cost every store read and every
``dataclasses.replace`` pays too. :func:`quick_init` gives such a class an ``__init__`` with the
same parameters, defaults and default factories that writes each slot through its own
descriptor instead: the same instance, still frozen (assignment raises as before), built in
about half the time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_UNSET: Any = object()
"""A field with a default factory that was not given (dataclasses has its own such marker)."""


def quick_init(cls: type[T]) -> type[T]:
    """``cls`` (a frozen, slotted, keyword-only dataclass without ``__post_init__``) with an
    ``__init__`` writing each slot through its descriptor; the one dataclasses generated stays
    reachable as its ``__wrapped__`` (so ``inspect.signature`` still shows the fields)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which quick_init does not call")
    fields: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not all(f.kw_only and f.init for f in fields):
        raise TypeError(f"{cls.__name__}: every field must be keyword-only and set by __init__")
    if any(f.name == "self" or f.name.startswith("_") for f in fields):
        raise TypeError(f"{cls.__name__}: a field named self or _… would clash in __init__")
    scope: dict[str, Any] = {"_UNSET": _UNSET}
    params_, lines = [], []
    for i, f in enumerate(fields):
        scope[f"_set{i}"] = _slot(cls, f.name).__set__
        value = f.name
        if f.default is not dataclasses.MISSING:
            scope[f"_default{i}"] = f.default
            params_.append(f"{f.name}=_default{i}")
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"_factory{i}"] = f.default_factory
            params_.append(f"{f.name}=_UNSET")
            value = f"_factory{i}() if {f.name} is _UNSET else {f.name}"
        else:
            params_.append(f.name)
        lines.append(f"_set{i}(self, {value})")
    head = f"def __init__(self, *, {', '.join(params_)}):" if params_ else "def __init__(self):"
    # Generated from the class's own field names, as dataclasses generates its __init__.
    exec("\n    ".join([head, *lines, "pass"]), scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    init.__wrapped__ = cls.__init__
    setattr(cls, "__init__", init)  # noqa: B010 - mypy refuses assigning a method
    return cls


def _slot(cls: type, name: str) -> Any:
    """The member descriptor of the slot ``name`` (of ``cls`` or of a dataclass it extends)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise TypeError(f"{cls.__name__}.{name} has no slot")
