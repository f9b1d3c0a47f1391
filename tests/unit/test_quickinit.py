"""``quick_init``: the domain's dataclasses built as dataclasses would build them, faster."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import pytest

from rota.core import jobspec, models
from rota.core.quickinit import quick_init

QUICK = [
    cls
    for module in (models, jobspec)
    for cls in vars(module).values()
    if isinstance(cls, type)
    and cls.__module__ == module.__name__
    and dataclasses.is_dataclass(cls)
    and getattr(cls.__init__, "__wrapped__", None) is not None
]


def _values(fields: list[dataclasses.Field[Any]]) -> dict[str, object]:
    return {f.name: object() for f in fields}


def _built(cls: type, kwargs: dict[str, object], *, original: bool) -> object:
    if not original:
        return cls(**kwargs)
    made = object.__new__(cls)
    cls.__init__.__wrapped__(made, **kwargs)  # type: ignore[misc]
    return made


def test_the_domain_models_are_built_quickly() -> None:
    names = {cls.__name__ for cls in QUICK}
    assert {"Job", "JobSpec", "Occurrence", "StatusChange", "StatusRecord"} <= names


@pytest.mark.parametrize("cls", QUICK, ids=lambda cls: cls.__name__)
def test_every_field_given_builds_what_dataclasses_builds(cls: type) -> None:
    kwargs = _values(list(dataclasses.fields(cls)))
    quick, original = _built(cls, kwargs, original=False), _built(cls, kwargs, original=True)
    for name, value in kwargs.items():
        assert getattr(quick, name) is value is getattr(original, name)


@pytest.mark.parametrize("cls", QUICK, ids=lambda cls: cls.__name__)
def test_the_defaults_and_factories_are_those_of_the_fields(cls: type) -> None:
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    kwargs = _values(required)
    quick, original = _built(cls, kwargs, original=False), _built(cls, kwargs, original=True)
    for f in fields:
        got, expected = getattr(quick, f.name), getattr(original, f.name)
        if f.name in kwargs:
            assert got is kwargs[f.name]
        elif f.default is not dataclasses.MISSING:
            assert got is f.default
        else:  # a factory's (a time now, an empty dict): a value of its own, alike
            assert type(got) is type(expected)


@pytest.mark.parametrize("cls", QUICK, ids=lambda cls: cls.__name__)
def test_bad_calls_are_refused_as_before_and_the_instance_stays_frozen(cls: type) -> None:
    fields = dataclasses.fields(cls)
    kwargs = _values(list(fields))
    with pytest.raises(TypeError):
        cls(**kwargs, not_a_field=1)
    with pytest.raises(TypeError):
        cls(object(), **kwargs)  # keyword-only
    required = [f.name for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    if required:
        with pytest.raises(TypeError):
            cls(**{k: v for k, v in kwargs.items() if k != required[0]})
    made = cls(**kwargs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, fields[0].name, 1)
    # what documentation and tools read is the dataclass's signature
    assert list(inspect.signature(cls).parameters) == [f.name for f in fields]


def test_replace_goes_through_the_quick_init() -> None:
    job = models.Job(id=UUID(int=1), job_type="a")
    moved = dataclasses.replace(job, job_type="b")
    assert (moved.job_type, moved.id, moved.created_at) == ("b", job.id, job.created_at)


def test_what_it_cannot_build_like_dataclasses_is_refused() -> None:
    @dataclass(slots=True, kw_only=True)
    class Mutable:
        a: int = 0

    @dataclass(frozen=True, kw_only=True)
    class NoSlots:
        a: int = 0

    @dataclass(frozen=True, slots=True)
    class Positional:
        a: int = 0

    @dataclass(frozen=True, slots=True, kw_only=True)
    class PostInit:
        a: int = 0

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True, kw_only=True)
    class NotInInit:
        a: int = field(default=0, init=False)

    for cls in (Mutable, NoSlots, Positional, PostInit, NotInInit):
        with pytest.raises(TypeError):
            quick_init(cls)


def test_inherited_fields_are_written_through_the_base_class_slot() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Base:
        a: int = 1

    @quick_init
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Child(Base):
        b: list[int] = field(default_factory=list)

    child = Child(a=5)
    assert (child.a, child.b) == (5, [])
    assert Child().b is not Child().b  # a factory's value each time


def test_type_hints_and_clashing_names() -> None:
    assert typing.get_type_hints(models.Job.__init__)["job_type"] is str

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Private:
        _set0: int = 0

    with pytest.raises(TypeError, match="clash"):
        quick_init(Private)
