"""evaluators.base.shared_call: a caller that joined a failed shared judge call gets an error
of its own (same type, message and attributes, no spend)."""

from __future__ import annotations

import asyncio

import pytest

from evalstream.errors import JudgeError
from evalstream.evaluators.base import shared_call
from evalstream.events import JudgeInfo
from evalstream.judges.base import judge_info_of, with_judge_info
from evalstream.judges.cache import TTLCache


class GatewayError(JudgeError):
    """A plugin judge's error whose constructor does not take the message first."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"gateway {code}: {detail}", retryable=code >= 500, status=code)
        self.code = code


async def test_a_joined_failure_is_copied_whatever_the_error_class_constructor() -> None:
    cache: TTLCache[str] = TTLCache(16, 60.0)

    async def failing() -> str:
        await asyncio.sleep(0.01)
        raise with_judge_info(GatewayError(503, "busy"), JudgeInfo(
            backend="plugin", model="m", requests=1, cost_usd=0.5))

    first, joined = await asyncio.gather(shared_call(cache, "k", failing),
                                         shared_call(cache, "k", failing),
                                         return_exceptions=True)
    assert isinstance(first, GatewayError)
    assert isinstance(joined, GatewayError)  # not a TypeError from rebuilding it
    assert joined is not first
    assert (str(joined), joined.code, joined.status, joined.retryable) == (
        "gateway 503: busy", 503, 503, True)
    info = judge_info_of(joined)
    assert info is not None
    assert (info.backend, info.model, info.requests, info.cost_usd) == ("plugin", "m", 0, 0.0)
    first_info = judge_info_of(first)
    assert first_info is not None
    assert first_info.cost_usd == pytest.approx(0.5)


async def test_a_joined_failure_without_judge_info_is_copied_without_any() -> None:
    # A judge that set no JudgeInfo on its error: the joiner's copy has none either (and
    # is still the judge's error type, not an AttributeError from reading a missing info).
    cache: TTLCache[str] = TTLCache(16, 60.0)

    async def failing() -> str:
        await asyncio.sleep(0.01)
        raise GatewayError(502, "bad gateway")

    first, joined = await asyncio.gather(shared_call(cache, "k", failing),
                                         shared_call(cache, "k", failing),
                                         return_exceptions=True)
    assert isinstance(first, GatewayError)
    assert isinstance(joined, GatewayError)
    assert joined is not first
    assert judge_info_of(joined) is None
