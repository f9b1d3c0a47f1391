"""The rules of job dependencies (rota.core.dependencies): which dependents of a graph run
run, which are skipped and why, fan-out and fan-in, skip propagation, and cycles."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from rota.core.dependencies import Dependency, DependencyRule, Graph, find_cycle, resolve
from rota.core.errors import ValidationError
from rota.core.models import OccurrenceStatus
from rota.services.dependencies import parse_dependencies

S = OccurrenceStatus
R = DependencyRule


def ids(n: int) -> list[UUID]:
    return [uuid4() for _ in range(n)]


@pytest.mark.parametrize(
    ("rule", "status", "runs"),
    [
        (R.SUCCESS, S.COMPLETED, True),
        (R.SUCCESS, S.FAILED, False),
        (R.SUCCESS, S.SKIPPED, False),
        (R.FAILURE, S.FAILED, True),
        (R.FAILURE, S.TIMED_OUT, True),
        (R.FAILURE, S.COMPLETED, False),
        (R.FAILURE, S.CANCELLED, False),
        (R.COMPLETION, S.COMPLETED, True),
        (R.COMPLETION, S.FAILED, True),
        (R.COMPLETION, S.CANCELLED, True),
        (R.COMPLETION, S.SKIPPED, True),
    ],
)
def test_a_rule_decides_on_the_upstreams_final_status(
    rule: DependencyRule, status: OccurrenceStatus, runs: bool
) -> None:
    a, b = ids(2)
    decisions = resolve(a, Graph([Dependency(b, a, rule)]), {a: status}, {a: "A"})
    if runs:
        assert [job for job, _ in decisions.run] == [b]
        assert decisions.skip == []
    else:
        assert decisions.run == []
        assert decisions.skip == [
            (b, f"upstream A {status.name.title().replace('_', '')}; needs {rule.value}")
        ]
        assert decisions.finished


@pytest.mark.parametrize("status", [S.QUEUED, S.RUNNING, S.UNKNOWN])
def test_an_upstream_not_final_decides_nothing(status: OccurrenceStatus) -> None:
    """A failure that will be retried goes back to Queued: not final, nothing is decided."""
    a, b = ids(2)
    decisions = resolve(a, Graph([Dependency(b, a, R.FAILURE)]), {a: status})
    assert decisions.run == decisions.skip == []
    assert not decisions.finished


def test_fan_out_then_fan_in_waits_for_every_upstream() -> None:
    a, b1, b2, c = ids(4)
    graph = Graph(
        [Dependency(b1, a), Dependency(b2, a), Dependency(c, b1), Dependency(c, b2, R.COMPLETION)]
    )
    first = resolve(a, graph, {a: S.COMPLETED})
    assert sorted(job for job, _ in first.run) == sorted([b1, b2])
    waiting = resolve(a, graph, {a: S.COMPLETED, b1: S.COMPLETED, b2: S.RUNNING})
    assert waiting.run == waiting.skip == []
    both = resolve(a, graph, {a: S.COMPLETED, b1: S.COMPLETED, b2: S.FAILED})
    assert [job for job, _ in both.run] == [c]
    assert graph.levels(a) == {a: 0, b1: 1, b2: 1, c: 2}


def test_a_skip_propagates_down_the_graph_by_each_rule() -> None:
    """A skipped on success -> B skipped; C after B on completion runs; D after B on success
    is skipped in the same pass."""
    a, b, c, d = ids(4)
    graph = Graph([Dependency(b, a), Dependency(c, b, R.COMPLETION), Dependency(d, b)])
    decisions = resolve(a, graph, {a: S.FAILED}, {a: "A", b: "B"})
    assert [job for job, _ in decisions.skip] == [b, d]
    assert decisions.skip[1][1] == "upstream B Skipped; needs success"
    assert [job for job, _ in decisions.run] == [c]
    assert not decisions.finished


def test_upstreams_outside_the_run_do_not_take_part() -> None:
    """C runs after A and X; a run rooted at A covers A's downstream only: X is not waited for."""
    a, x, c = ids(3)
    graph = Graph([Dependency(c, a), Dependency(c, x)])
    assert [job for job, _ in resolve(a, graph, {a: S.COMPLETED}).run] == [c]


def test_a_run_is_finished_when_every_job_is_final() -> None:
    a, b = ids(2)
    graph = Graph([Dependency(b, a)])
    assert not resolve(a, graph, {a: S.COMPLETED, b: S.RUNNING}).finished
    assert resolve(a, graph, {a: S.COMPLETED, b: S.COMPLETED}).finished


def test_a_cycle_is_found_with_the_jobs_along_it() -> None:
    a, b, c = ids(3)
    edges = [Dependency(b, a), Dependency(c, b)]
    assert find_cycle(edges, a, [c]) == [a, c, b, a]
    assert find_cycle(edges, a, [a]) == [a, a]
    assert find_cycle(edges, c, [a]) is None  # c already after b after a: no cycle
    assert find_cycle(edges, b, [c]) == [b, c, b]  # b's old edge to a is replaced


def test_parse_dependencies_names_the_field() -> None:
    job, up = ids(2)
    edges = parse_dependencies(job, [{"jobId": str(up), "on": "failure"}])
    assert edges == [Dependency(job, up, R.FAILURE)]
    cases = [
        ([{"jobId": "nope"}], "dependsOn[0]"),
        ([{"jobId": str(up), "on": "sometimes"}], "dependsOn[0].on"),
        ([{"jobId": str(job)}], "dependsOn[0]"),
        ([{"jobId": str(up)}, {"jobId": str(up)}], "dependsOn[1]"),
        ([{"jobId": str(uuid4())} for _ in range(21)], "dependsOn"),
    ]
    for raw, field in cases:
        with pytest.raises(ValidationError) as info:
            parse_dependencies(job, raw)
        assert info.value.field == field
