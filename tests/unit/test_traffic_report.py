"""The traffic harness's bookkeeping: what counts as a failure, a gap, a mix of models, a local address."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.traffic import Answer, TrafficReport, check_local


def ok(started: float, ended: float, backend: str) -> Answer:
    return Answer("completion", started, ended, backend=backend, model="chat")


def test_backends_fold_repeats_in_order_of_request_start() -> None:
    report = TrafficReport([ok(0, 1, "a"), ok(1, 2, "a"), ok(2, 3, "ollama"), ok(3, 4, "b"), ok(4, 5, "b")])
    assert report.backends() == ["a", "ollama", "b"]


def test_interleaving_within_a_blip_at_a_switch_is_one_switch() -> None:
    answers = [ok(0, 1, "a"), ok(10.0, 10.1, "b"), ok(10.05, 10.1, "a"), ok(10.1, 10.2, "b"), ok(20, 21, "b")]
    assert TrafficReport(answers).backends() == ["a", "b"]


def test_going_back_for_longer_than_a_blip_is_seen() -> None:
    answers = [ok(0, 1, "a"), ok(10, 11, "b"), ok(12, 13, "a"), ok(14, 15, "a")]
    assert TrafficReport(answers).backends() == ["a", "b", "a"]


def test_an_old_model_answering_after_the_new_one_did_is_a_mix() -> None:
    report = TrafficReport([ok(0, 1, "a"), ok(1, 2, "b"), ok(2.6, 3, "a")])
    assert report.mixed_answers() == [report.answers[2]]


def test_a_request_in_flight_when_the_new_model_first_answered_is_no_mix() -> None:
    report = TrafficReport([ok(0, 1, "a"), ok(1, 2, "b"), ok(1.5, 2.5, "a")])
    assert report.mixed_answers() == []


def test_failures_do_not_count_as_answers_for_gaps() -> None:
    failed = Answer("chat-stream", 1, 2, error="truncated stream: no [DONE]")
    report = TrafficReport([ok(0, 1, "a"), failed, ok(3, 4.5, "a")])
    assert report.failures == [failed]
    assert report.longest_gap() == pytest.approx(3.5)


@given(st.lists(st.floats(min_value=0, max_value=1000), min_size=2, max_size=50))
def test_longest_gap_lies_between_the_mean_gap_and_the_whole_span(ends: list[float]) -> None:
    gap = TrafficReport([ok(e, e, "a") for e in ends]).longest_gap()
    span = max(ends) - min(ends)
    assert span / (len(ends) - 1) - 1e-9 <= gap <= span + 1e-9


@pytest.mark.parametrize("host", ["127.0.0.1", "10.96.12.7", "10.245.0.9", "::1"])
def test_local_cluster_addresses_are_targets(host: str) -> None:
    check_local(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "192.168.1.1", "8.8.8.8", "10.97.0.1"])
def test_other_addresses_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="not an address of this machine"):
        check_local(host)
