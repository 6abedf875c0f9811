"""Masks, weights and segments from credits, flags and advantages."""

from __future__ import annotations

import math

import pytest

from trajlake.credit.masks import (
    advantage_weights,
    all_turns,
    first_error,
    rise,
    segments_of,
    step_reject,
)


def test_segments_of() -> None:
    assert segments_of([True, True, False, True]) == [0, 0, None, 1]
    assert segments_of([False, False]) == [None, None]
    assert segments_of([]) == []


def test_rise_segments_and_eps_boundary() -> None:
    credits = [0.3, -0.1, 0.6, 0.35 - 0.30, 0.0499]
    masks = rise(credits, eps=0.05)
    assert masks.mask == [True, False, True, True, False]
    assert masks.segment_id == [0, None, 1, 1, None]
    assert masks.weight == [1.0, 0.0, 1.0, 1.0, 0.0]


def test_rise_resolved_keeps_all_turns() -> None:
    masks = rise([-0.5, 0.0, 0.1], eps=0.05, resolved=True)
    assert masks.mask == [True, True, True]
    assert masks.segment_id == [0, 0, 0]


def test_step_reject_keeps_the_rest() -> None:
    masks = step_reject([False, True, False, False])
    assert masks.mask == [True, False, True, True]
    assert masks.segment_id == [0, None, 1, 1]


def test_first_error() -> None:
    assert first_error([False, False, True, False]).mask == [True, True, False, False]
    assert first_error([True, False]).mask == [False, False]
    assert first_error([False, False]).mask == [True, True]


def test_advantage_weights() -> None:
    masks = advantage_weights([0.0, math.log(2), 10.0, -math.log(2), 1e6], beta=1.0, w_max=5.0)
    assert masks.weight == pytest.approx([1.0, 2.0, 5.0, 0.5, 5.0], abs=1e-12)
    assert all(masks.mask)
    assert advantage_weights([2 * math.log(3)], beta=2.0).weight == pytest.approx([3.0])
    with pytest.raises(ValueError):
        advantage_weights([0.0], beta=0.0)


def test_all_turns() -> None:
    masks = all_turns(3)
    assert masks.mask == [True] * 3 and masks.weight == [1.0] * 3 and len(masks) == 3
