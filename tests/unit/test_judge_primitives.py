"""Pure pieces of the LLM judge: logprob parsing, answers, buckets, breaker, cache, registry."""

from __future__ import annotations

import asyncio
import math
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from evalstream.config import CascadeJudgeConfig, OpenAIJudgeConfig
from evalstream.errors import ConfigError, JudgeError
from evalstream.judges.answers import parse_json_answer
from evalstream.judges.cache import TTLCache
from evalstream.judges.cascade import CascadeJudge
from evalstream.judges.logprobs import (
    MissingLogprobsError,
    OptionsNotFoundError,
    first_token_distinguishable,
    first_token_distribution,
    fold,
    option_probabilities,
)
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.registry import build_judges, close_judges
from evalstream.judges.resilience import (
    CircuitBreaker,
    CircuitState,
    TokenBucket,
    backoff_delay,
    parse_retry_after,
)
from evalstream.metrics import Metrics
from tests.support.clock import FakeClock

# --- logprobs ------------------------------------------------------------------------


@pytest.mark.parametrize(("token", "folded"), [
    ("Yes", "yes"), (" yes", "yes"), ("YES", "yes"), ("\u2581Yes", "yes"), ("\u0120no", "no"),
    ("yes.", "yes"), ('"3"', "3"), ("\n No", "no")])
def test_fold(token: str, folded: str) -> None:
    assert fold(token) == folded


def test_option_mass_is_summed_and_renormalised() -> None:
    dist = {"Yes": 0.5, " yes": 0.2, "YES": 0.1, "No": 0.1, "Maybe": 0.1}
    probs = option_probabilities(dist, ("yes", "no"))
    assert probs["yes"] == pytest.approx(0.8 / 0.9)
    assert probs["no"] == pytest.approx(0.1 / 0.9)


def test_no_option_in_top_tokens_raises() -> None:
    with pytest.raises(OptionsNotFoundError,
                       match=r"none of the answer options \['1', '2'\]") as caught:
        option_probabilities({"The": 0.9, "A": 0.1}, ("1", "2"))
    # At temperature 0 the same question gets the same tokens: retrying cannot help.
    assert caught.value.retryable is False


def test_shapes_of_each_provider() -> None:
    lp = math.log
    chat = {"choices": [{"logprobs": {"content": [{"token": "Yes", "logprob": lp(0.6),
            "top_logprobs": [{"token": "Yes", "logprob": lp(0.6), "bytes": [89]},
                             {"token": "No", "logprob": lp(0.4), "bytes": [78]}]}]}}]}
    legacy = {"choices": [{"logprobs": {"top_logprobs": [{"Yes": lp(0.6), " No": lp(0.4)}]}}]}
    native = {"completion_probabilities": [{"id": 1, "token": "Yes", "logprob": lp(0.6),
              "top_logprobs": [{"id": 1, "token": "Yes", "logprob": lp(0.6)},
                               {"id": 2, "token": "No", "logprob": lp(0.4)}]}]}
    post_sampling = {"completion_probabilities": [{"top_probs": [
        {"id": 1, "token": "Yes", "prob": 0.6}, {"id": 2, "token": "No", "prob": 0.4}]}]}
    old = {"completion_probabilities": [{"content": "Yes", "probs": [
        {"tok_str": "Yes", "prob": 0.6}, {"tok_str": "No", "prob": 0.4}]}]}
    for body in (chat, legacy, native, post_sampling, old):
        probs = option_probabilities(first_token_distribution(body), ("yes", "no"))
        assert probs["yes"] == pytest.approx(0.6)


def test_only_the_first_choice_and_the_first_position_are_read() -> None:
    # n > 1 choices or a longer generation (a backend ignoring max_tokens=1): the answer is
    # the first choice's first token, whatever later ones say.
    lp = math.log

    def position(yes: float) -> dict[str, object]:
        return {"token": "yes", "logprob": lp(yes), "top_logprobs": [
            {"token": "yes", "logprob": lp(yes)}, {"token": "no", "logprob": lp(1 - yes)}]}

    chat = {"choices": [{"logprobs": {"content": [position(0.9), position(0.1)]}},
                        {"logprobs": {"content": [position(0.2)]}}]}
    legacy = {"choices": [{"logprobs": {"top_logprobs": [{"yes": lp(0.9), "no": lp(0.1)},
                                                         {"yes": lp(0.1), "no": lp(0.9)}]}},
                          {"logprobs": {"top_logprobs": [{"yes": lp(0.2), "no": lp(0.8)}]}}]}
    native = {"completion_probabilities": [
        {"top_logprobs": [{"token": "yes", "logprob": lp(0.9)},
                          {"token": "no", "logprob": lp(0.1)}]},
        {"top_logprobs": [{"token": "yes", "logprob": lp(0.1)},
                          {"token": "no", "logprob": lp(0.9)}]}]}
    for body in (chat, legacy, native):
        probs = option_probabilities(first_token_distribution(body), ("yes", "no"))
        assert probs["yes"] == pytest.approx(0.9)


def test_chat_without_top_logprobs_falls_back_to_the_chosen_token() -> None:
    # A backend asked for logprobs but not returning top_logprobs still gives the sampled
    # token's own logprob: that is one option's mass, enough to answer.
    for top in ({}, {"top_logprobs": []}, {"top_logprobs": None}):
        body = {"choices": [{"logprobs": {"content": [
            {"token": " No", "logprob": math.log(0.7), **top}]}}]}
        assert first_token_distribution(body) == {" No": pytest.approx(0.7)}
        assert option_probabilities(first_token_distribution(body), ("yes", "no")) == {
            "yes": 0.0, "no": 1.0}


def test_malformed_entries_are_skipped() -> None:
    # Entries that are not objects, or lack a string token or a number, are skipped, not a
    # crash: the rest of the distribution is still read.
    top: list[object] = [None, "yes", ["no", -0.1], {"token": 5, "logprob": -0.1},
                         {"token": "maybe"}, {"token": "yes", "logprob": "high"},
                         {"token": "yes", "logprob": math.log(0.6)},
                         {"token": "no", "logprob": math.log(0.4)}]
    chat = {"choices": [{"logprobs": {"content": [{"token": "yes", "top_logprobs": top}]}}]}
    native = {"completion_probabilities": [{"top_logprobs": top}]}
    for body in (chat, native):
        assert first_token_distribution(body) == {
            "yes": pytest.approx(0.6), "no": pytest.approx(0.4)}


def test_unusual_numbers_are_clamped_or_ignored() -> None:
    def chat(top: list[dict[str, object]]) -> dict[str, object]:
        return {"choices": [{"logprobs": {"content": [{"token": "x", "top_logprobs": top}]}}]}

    # A positive logprob is impossible (and math.exp overflows above ~709): the response is
    # corrupt (the judge turns the ValueError into a non-retryable JudgeError).
    with pytest.raises(ValueError, match="above 0"):
        first_token_distribution(chat([{"token": "yes", "logprob": 1000.0},
                                       {"token": "no", "logprob": -1.0}]))
    with pytest.raises(ValueError, match="above 0"):
        first_token_distribution(
            {"choices": [{"logprobs": {"top_logprobs": [{"yes": 1e3, "no": -1.0}]}}]})
    # Rounding noise just above 0 (or 1) is a certain token, clamped.
    assert first_token_distribution(chat([{"token": "yes", "logprob": 1e-6},
                                          {"token": "no", "logprob": -1.0}])) == {
        "yes": 1.0, "no": pytest.approx(math.exp(-1.0))}
    assert first_token_distribution(
        {"choices": [{"logprobs": {"top_logprobs": [{"yes": 1e-6, "no": 10**400}]}}]}
    ) == {"yes": 1.0}  # 10**400 is not a finite float: ignored
    # Probabilities stay within [0, 1]: duplicates of a token sum to at most their count.
    dist = first_token_distribution({"completion_probabilities": [{"top_probs": [
        {"token": "Yes", "prob": 1.00001}, {"token": " yes", "prob": 1.0},
        {"token": "no", "prob": 0.1}]}]})
    assert option_probabilities(dist, ("yes", "no")) == {
        "yes": pytest.approx(2 / 2.1), "no": pytest.approx(0.1 / 2.1)}
    with pytest.raises(ValueError, match="above 1"):
        first_token_distribution({"completion_probabilities": [{"top_probs": [
            {"token": "Yes", "prob": 1e308}, {"token": "no", "prob": 0.1}]}]})
    # Non-finite values are ignored (a logprob that is NaN falls back to its prob).
    dist = first_token_distribution(chat([
        {"token": "yes", "logprob": math.nan, "prob": 0.5}, {"token": "no", "logprob": math.inf},
        {"token": "maybe", "prob": math.nan}, {"token": "no", "logprob": -math.inf}]))
    assert dist == {"yes": 0.5}
    assert option_probabilities({"yes": math.nan, "no": math.inf, "No": 0.5},
                                ("yes", "no")) == {"yes": 0.0, "no": 1.0}


@pytest.mark.parametrize(("options", "readable"), [
    (("yes", "no"), True), (("1", "2", "3", "4", "5", "6", "7", "8", "9"), True),
    (("negative", "neutral", "positive"), True), (("Billing", "shipping", "other"), True),
    (("account", "account_security"), False),  # first token "account" for both
    (("billing_refund", "billing_invoice", "other"), False),  # "billing" matches neither
    (("account", "accounting"), False), (("1", "10"), False), (("v2", "v3"), False),
    (("not sure", "yes"), False),
])
def test_first_token_distinguishable(options: tuple[str, ...], readable: bool) -> None:
    assert first_token_distinguishable(options) is readable


@pytest.mark.parametrize("body", [
    {"choices": [{"message": {"content": "Yes"}, "logprobs": None}]},
    {"choices": [{"logprobs": {"content": []}}]},
    {"content": "Yes"},
    {"choices": []},
    ["not", "an", "object"],
])
def test_missing_logprobs_detected(body: object) -> None:
    with pytest.raises(MissingLogprobsError):
        first_token_distribution(body)



def test_options_carrying_too_little_mass_are_not_read_as_a_verdict() -> None:
    """A reply that begins with something else leaves a residue on the options:
    renormalised, 2% and 1% read as a 67% "yes"."""
    dist = {"Verdict": 0.97, "yes": 0.02, "no": 0.01}
    with pytest.raises(OptionsNotFoundError, match=r"carry only 3\.0% .*min_option_mass 0\.5"):
        option_probabilities(dist, ("yes", "no"), min_mass=0.5)
    # At or above the floor the options are renormalised as before.
    assert option_probabilities({"yes": 0.45, "no": 0.05, "The": 0.5}, ("yes", "no"),
                                min_mass=0.5) == pytest.approx({"yes": 0.9, "no": 0.1})
    assert option_probabilities(dist, ("yes", "no")) == pytest.approx(
        {"yes": 2 / 3, "no": 1 / 3})


# --- strict JSON answers -------------------------------------------------------------


@pytest.mark.parametrize(("text", "answer"), [
    ('{"output": "yes"}', "yes"), (' {"output": "No"} ', "no"),
    ('```json\n{"output": "yes"}\n```', "yes"), ('{"output": 3}', "3"),
    # Fences without a language tag: only a first line that is a tag (a word) is dropped.
    ('```{"output": "no"}```', "no"), ('```{"output": "no"}\n```', "no"),
    ('```\n{"output": "yes"}\n```', "yes")])
def test_json_answers(text: str, answer: str) -> None:
    assert parse_json_answer(text, ("yes", "no", "3")) == answer


@pytest.mark.parametrize("text", [
    "yes", '{"answer": "yes"}', '{"output": "yes", "why": "x"}', '{"output": "maybe"}',
    '{"output": true}', "[\"yes\"]", '{"output": "yes"} trailing',
    # Two verdicts in one object: Python's json keeps the last one silently, so an echo of
    # content (or a model that changes its mind) would pass for one strict answer.
    '{"output": "no", "output": "yes"}', '{"output": "yes", "output": "yes"}'])
def test_json_answers_are_strict(text: str) -> None:
    with pytest.raises(JudgeError):
        parse_json_answer(text, ("yes", "no"))


# --- backoff and Retry-After ---------------------------------------------------------


def test_backoff_is_jittered_bounded_and_honours_retry_after() -> None:
    rng = random.Random(1)
    delays = [backoff_delay(a, 0.5, 4.0, rng=rng) for a in range(1, 8) for _ in range(20)]
    assert min(delays) >= 0.5
    assert max(delays) <= 4.0
    assert len({round(d, 6) for d in delays}) > 100  # jittered, not lock-step
    assert backoff_delay(1, 0.5, 4.0, retry_after=10.0, rng=rng) >= 10.0


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True),
                             now=now) == pytest.approx(30.0)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


# --- token bucket --------------------------------------------------------------------


async def test_token_bucket_waits_for_refill() -> None:
    bucket = TokenBucket(rate=100.0, capacity=5.0)
    assert [await bucket.take() for _ in range(5)] == [0.0] * 5
    waited = await bucket.take(3.0)
    assert waited == pytest.approx(0.03, abs=0.01)
    bucket.debit(10.0)  # actual usage exceeded the estimate
    assert await bucket.take(1.0) >= 0.09


# --- circuit breaker -----------------------------------------------------------------


async def test_breaker_opens_waits_probes_and_closes() -> None:
    clock = FakeClock()
    states: list[CircuitState] = []
    breaker = CircuitBreaker(failures=2, reset_s=10.0, on_change=states.append, clock=clock)
    assert await breaker.acquire() is False
    await breaker.record(False)
    await breaker.record(False)
    assert breaker.state is CircuitState.OPEN
    waiter = asyncio.create_task(breaker.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done()  # open: callers wait, nothing is rejected
    clock.now = 10.0
    waiter.cancel()
    assert await breaker.acquire() is True  # the half-open probe
    second = asyncio.create_task(breaker.acquire())
    await asyncio.sleep(0.01)
    assert not second.done()  # only one probe at a time
    await breaker.record(False, probe=True)  # probe failed: open again
    assert breaker.state is CircuitState.OPEN
    clock.now = 20.0
    second.cancel()
    assert await breaker.acquire() is True
    await breaker.record(True, probe=True)
    assert breaker.state is CircuitState.CLOSED
    assert states == [CircuitState.OPEN, CircuitState.HALF_OPEN, CircuitState.OPEN,
                      CircuitState.HALF_OPEN, CircuitState.CLOSED]


async def probing_breaker() -> CircuitBreaker:
    """A breaker opened by one failure, whose half-open probe slot the caller now holds."""
    clock = FakeClock()
    breaker = CircuitBreaker(failures=1, reset_s=1.0, clock=clock)
    await breaker.record(False)
    clock.now = 1.0
    assert await breaker.acquire() is True
    return breaker


async def test_abandoned_probe_frees_the_slot() -> None:
    breaker = await probing_breaker()
    await breaker.abandon(probe=True)
    assert await asyncio.wait_for(breaker.acquire(), 1) is True


async def test_abandon_frees_the_probe_even_when_cancelled_waiting_for_the_lock() -> None:
    breaker = await probing_breaker()
    await breaker._cond.acquire()  # private: someone else holds the breaker's lock
    abandoning = asyncio.create_task(breaker.abandon(probe=True))
    await asyncio.sleep(0.01)
    abandoning.cancel()  # e.g. shutdown cancels the request a second time
    with pytest.raises(asyncio.CancelledError):
        await abandoning
    breaker._cond.release()
    assert await asyncio.wait_for(breaker.acquire(), 1) is True


# --- cache ---------------------------------------------------------------------------


async def test_cache_lru_ttl_and_single_flight() -> None:
    clock = FakeClock()
    cache: TTLCache[int] = TTLCache(max_size=2, ttl_s=5.0, clock=clock)
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return calls

    results = await asyncio.gather(*(cache.get_or_compute("a", compute) for _ in range(5)))
    assert calls == 1
    assert [hit for _, hit in results] == [False, True, True, True, True]
    await cache.get_or_compute("b", compute)
    await cache.get_or_compute("c", compute)  # evicts "a" (least recently used)
    assert cache.get("a") is None
    assert len(cache) == 2
    clock.now = 6.0
    assert cache.get("b") is None  # expired


async def test_failed_computation_is_not_cached() -> None:
    cache: TTLCache[int] = TTLCache(max_size=10, ttl_s=5.0)

    async def boom() -> int:
        raise JudgeError("down")

    with pytest.raises(JudgeError):
        await cache.get_or_compute("k", boom)
    assert cache.get("k") is None


async def test_waiter_computes_itself_when_the_first_caller_is_cancelled() -> None:
    cache: TTLCache[int] = TTLCache(max_size=10, ttl_s=5.0)

    async def slow() -> int:
        await asyncio.sleep(10)
        return 0

    async def fast() -> int:
        return 1

    leader = asyncio.create_task(cache.get_or_compute("k", slow))
    await asyncio.sleep(0.01)
    follower = asyncio.create_task(cache.get_or_compute("k", fast))
    await asyncio.sleep(0.01)
    leader.cancel()
    assert await asyncio.wait_for(follower, 1) == (1, False)
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_a_cancelled_waiter_stays_cancelled_when_the_computation_is_too() -> None:
    cache: TTLCache[str] = TTLCache(4, math.inf)
    started = asyncio.Event()
    computed: list[str] = []

    async def slow(name: str) -> str:
        started.set()
        computed.append(name)
        await asyncio.sleep(10)
        return name

    first = asyncio.create_task(cache.get_or_compute("k", lambda: slow("first")))
    await started.wait()
    second = asyncio.create_task(cache.get_or_compute("k", lambda: slow("second")))
    await asyncio.sleep(0)
    first.cancel()
    second.cancel()  # both at once: the waiter must not start its own computation
    for task in (first, second):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert computed == ["first"]


async def test_zero_size_disables_caching() -> None:
    cache: TTLCache[int] = TTLCache(0, math.inf)
    calls = 0

    async def one() -> int:
        nonlocal calls
        calls += 1
        return 1

    assert await cache.get_or_compute("k", one) == (1, False)
    assert await cache.get_or_compute("k", one) == (1, False)
    assert calls == 2
    assert len(cache) == 0


# --- registry ------------------------------------------------------------------------


async def test_registry_builds_openai_and_cascade_and_closes_them() -> None:
    configs = {
        "smart": CascadeJudgeConfig(then="llm"),  # listed before what it depends on
        "llm": OpenAIJudgeConfig(base_url="http://127.0.0.1:9/v1", model="m"),
    }
    judges = build_judges(configs, Metrics())
    assert set(judges) == {"builtin", "smart", "llm"}
    assert isinstance(judges["llm"], OpenAIJudge)
    cascade = judges["smart"]
    assert isinstance(cascade, CascadeJudge)
    assert cascade.then is judges["llm"]
    assert cascade.first is judges["builtin"]
    await close_judges(judges)


def test_registry_rejects_cycles_and_dangling_references() -> None:
    cyclic = {"a": CascadeJudgeConfig(then="b"), "b": CascadeJudgeConfig(then="a")}
    with pytest.raises(ConfigError, match="cycle"):
        build_judges(cyclic, Metrics())
    with pytest.raises(ConfigError, match="'ghost' is referenced but not defined"):
        build_judges({"a": CascadeJudgeConfig(then="ghost")}, Metrics())


@pytest.mark.parametrize(("field", "value", "message"), [
    ("base_url", "api.openai.com", "must start with http"),
    ("headers", {"Authorization": "Bearer x"}, "not in headers"),
    ("deadline_s", 1.0, "deadline_s"),
])
def test_openai_config_validation(field: str, value: object, message: str) -> None:
    settings: dict[str, object] = {"base_url": "https://x/v1", "model": "m", "timeout_s": 5.0}
    settings[field] = value
    with pytest.raises(ValueError, match=message):
        OpenAIJudgeConfig(**settings)  # type: ignore[arg-type]
