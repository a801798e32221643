"""One event through sampling, routing and the evaluators of its route(s).

The pipeline is transport-free: the streaming worker and the offline ``evalstream eval``
both drive it. The worker's message path (``app/message_path.py``) splits the work so it
can bound concurrency per evaluation and count only durable results: :meth:`Pipeline.plan`
(pure, synchronous: sampling and routing, skips counted), :meth:`Pipeline.run` (one
evaluator on one event, never raises for content) and :meth:`Pipeline.record` (counts a
result's outcome once the caller has made it durable).
:meth:`Pipeline.evaluate` does all three for callers that do not need the split.

It owns what happens per event and per evaluation: the sampling and routing decision,
running an evaluator, its result (or the error result standing in for it; their fields
are built in ``app/result_build.py``) and counting the outcome. What is fixed by the
settings (evaluators created and bound to their metric children, result ids and rates) is
built once in ``app/bindings.py``.

Canaries (``evalstream.canary: "true"``, see ``app/calibration.py``) bypass sampling: every
evaluator of every route they match is planned, at rate 1, with the canary's gold answer
(``app/canary_plan.py``); their results are counted as calibration only, never as traffic.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator, Mapping
from datetime import UTC
from typing import Any

from pydantic import ValidationError

from evalstream.app.bindings import Planned, build_routes, load_plugins
from evalstream.app.calibration import Calibration, canary_marker, gold_keys
from evalstream.app.canary_plan import CanaryPlanner
from evalstream.app.result_build import error_result, ok_result, widest_error_input
from evalstream.app.sessions import widest_stand_in_details
from evalstream.config import EvaluatorSpec, Route, Settings
from evalstream.errors import JudgeError, SkipEvaluation
from evalstream.evaluators.base import Evaluator
from evalstream.events import CANARY_ATTRIBUTE, EvalResult, JudgeInfo, TraceEvent
from evalstream.judges.base import Judge, judge_info_of
from evalstream.logging import LogLimits, get_logger
from evalstream.metrics import Metrics
from evalstream.routing import Router
from evalstream.sampling import Sampler

__all__ = ["Pipeline"]

log = get_logger(__name__)

#: Skip reasons are metric label values: short codes, at most this many distinct ones.
_REASON = re.compile(r"[a-z][a-z0-9_]{0,63}")
_MAX_SKIP_REASONS = 32


class Pipeline:
    """Sampling + routing + evaluators, built once from the settings.

    Args:
        settings: The configuration.
        judges: Judges by name (``build_judges``); must include every judge a route names.
        metrics: Where counts, scores and latencies go.

    Raises:
        ConfigError: an evaluator is unknown or its params are invalid (naming the field).
    """

    def __init__(self, settings: Settings, judges: Mapping[str, Judge], metrics: Metrics) -> None:
        load_plugins(settings.plugins)
        self.settings = settings
        self.metrics = metrics
        self._key_missing_said = False
        self._sampler = Sampler(settings.sampling, self._key_missing)
        self._router = Router(settings.routes, settings.worker.routing)
        self._routes = build_routes(settings, judges, metrics, self._sampler)
        #: No route (nor stratum of one) samples above this rate: events whose fraction is
        #: higher can be skipped before routing, and before a decoder builds them (see
        #: ``may_sample``).
        self._max_rate = max(self._sampler.rate_for(rate) for r in settings.routes
                             for rate in r.sample_rates())
        self._skip_sampling = metrics.events_skipped.labels("sampling").inc
        self._skip_no_route = metrics.events_skipped.labels("no_route").inc
        self._lag = metrics.end_to_end_lag.observe
        self._skip_counters: dict[str, Any] = {}
        self._result_attributes = tuple(settings.results.attributes)
        self._log_content = settings.logging.log_content
        #: Per (route, evaluator): an evaluator failing on every event (a plugin bug, a
        #: shape of event it cannot take) must not log a line per event.
        self._failure_logs: LogLimits[tuple[str, str]] = LogLimits()
        self._canaries = settings.canaries.enabled
        self._calibration = Calibration(metrics)
        self._canary = CanaryPlanner(self._router, self._routes, self._calibration,
                                     skip_no_route=self._skip_no_route,
                                     skip_sampling=self._skip_sampling)

    def _key_missing(self) -> None:
        """Say once that events lack the sampling key: with ``session_id``, a format or
        producer that never sets one samples every event on its own, not per conversation,
        which only the traffic can tell."""
        if not self._key_missing_said:
            self._key_missing_said = True
            log.warning("sampling_key_missing", key=self.settings.sampling.key,
                        note="events without it are sampled on their event_id, each on its "
                             "own (said once per process)")

    @property
    def evaluators(self) -> list[Evaluator[Any]]:
        """Every configured evaluator instance, in route order."""
        return [b.evaluator for r in self._routes for b in r.evaluators]

    def route_evaluators(self) -> Iterator[
            tuple[int, Route, list[tuple[EvaluatorSpec, Evaluator[Any]]]]]:
        """Each route (index in ``settings.routes``, config) with its evaluators' specs
        paired with the instances built from them, for checks that need both."""
        for ri, runtime in enumerate(self._routes):
            route = runtime.route
            yield ri, route, [(spec, bound.evaluator) for spec, bound
                              in zip(route.evaluators, runtime.evaluators, strict=True)]

    @property
    def sampling_key(self) -> str:
        """The TraceEvent field sampling hashes."""
        return self._sampler.key

    @property
    def sampler(self) -> Sampler:
        """The sampler every decision is taken with."""
        return self._sampler

    @property
    def max_rate(self) -> float:
        """The highest effective route rate: events at or above it are never sampled."""
        return self._max_rate

    def may_sample(self, key_value: str) -> bool:
        """Whether an event whose sampling key is ``key_value`` can be sampled by any route.

        Decoders call this before building the event, so an event outside the highest
        configured rate costs a hash, not a model. Such events are skipped as ``sampling``
        (not ``no_route``): no route would have evaluated them.
        """
        return self._sampler.fraction_of(key_value) < self._max_rate

    def plan(self, event: TraceEvent, topic: str,
             fraction: float | None = None) -> list[Planned]:
        """The evaluations ``event`` gets: sampled routes' evaluators. Counts skips.

        An event outside the highest configured rate, or whose every matching route left it
        out, is skipped as ``sampling``; one that could be sampled but matches no route is
        skipped as ``no_route``. ``fraction``, when given, is the event's sampling position
        already taken from its message key (``sampling.key: message_key``).

        A route with ``strata`` samples the event at its stratum's rate (nested as any
        rate: the same fraction, another threshold); its results carry that rate.

        A canary is planned whatever its fraction (``app/canary_plan.py``).
        """
        attributes = event.attributes
        if attributes and self._canaries and CANARY_ATTRIBUTE in attributes:
            marked = canary_marker(attributes)
            if marked:
                return self._canary.plan(event, topic)
            if marked is None:
                self._calibration.ignored("invalid_marker")
        if fraction is None:
            fraction = self._sampler.fraction(event)
        if fraction >= self._max_rate:
            self._skip_sampling(1)
            return []
        chosen = self._router.route(event, topic)
        if not chosen:
            self._skip_no_route(1)
            return []
        planned: list[Planned] = []
        for index in chosen:
            runtime = self._routes[index]
            rate, evaluations = runtime.rate, runtime.planned
            if runtime.strata_by is not None:  # the event's stratum's, built once
                rate, evaluations = runtime.select(event, topic)
            if fraction < rate:
                runtime.sampled(1)
                if runtime.uniform:
                    planned.extend(evaluations)
                else:  # the same position on the same hash: evaluator rates nest too
                    planned.extend(p for p in evaluations if fraction < p.sample_rate)
        if not planned:
            self._skip_sampling(1)
        elif attributes and self._canaries and gold_keys(attributes):
            # Gold answers on an event not marked as a canary are not used: say so.
            self._calibration.ignored("not_canary")
        return planned

    async def run(self, event: TraceEvent, planned: Planned) -> EvalResult | None:
        """Run one evaluation. Never raises for content: failures become error results.

        The result's outcome is not counted here: call :meth:`record` once it is durable,
        so the outcome counters agree with the results topic even when a result is refused
        by the broker and replaced by an error result.

        Returns:
            The result, or None when the evaluator skipped the event (counted by reason).
        """
        bound = planned.bound
        started = time.perf_counter()
        try:
            score = await bound.evaluator.evaluate(event)
        except SkipEvaluation as skip:
            self._count_skip(skip.reason)
            if planned.canary is None:
                bound.outcomes["skipped"](1)
            else:  # not traffic: the outcome is counted with the canaries
                self._calibration.skipped(bound.route, bound.label, bound.judge)
            return None
        except JudgeError as exc:
            # Which judge failed and what the failed call spent, when the judge said.
            return self.failed(event, planned, f"judge: {exc}", judge=judge_info_of(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an evaluator bug must not stop the worker
            # The message and the trace only when opted in: either may hold user data.
            if (limited := self._failure_logs.fields((bound.route, bound.label))) is not None:
                content = ({"error": str(exc), "input": event.input, "output": event.output}
                           if self._log_content else {})
                log.warning("evaluator_failed", route=bound.route, evaluator=bound.label,
                            error_type=type(exc).__name__, **content, **limited)
            return self.failed(event, planned, f"{type(exc).__name__}: {exc}")
        finally:
            bound.seconds(time.perf_counter() - started)
        try:
            result = ok_result(event, planned, score, self._result_attributes)
        except ValidationError as exc:
            # e.g. a score outside 0..1: report it as the evaluator's error, not a crash.
            fields = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors())
            # The judge answered (and was paid): its identity and spend stay on the result.
            judge = score.judge if isinstance(score.judge, JudgeInfo) else None
            return self.failed(event, planned, f"invalid score fields: {fields}", judge=judge)
        return result

    async def evaluate(self, event: TraceEvent, *, topic: str) -> list[EvalResult]:
        """Sample, route and run every evaluator the event gets, concurrently.

        The results' outcomes are counted as they are returned: there is no publish step
        here for them to wait for.
        """
        planned = self.plan(event, topic)
        if not planned:
            return []
        results = await asyncio.gather(*(self.run(event, p) for p in planned))
        done = []
        for p, result in zip(planned, results, strict=True):
            if result is not None:
                self.record(p, result)
                done.append(result)
        return done

    async def aclose(self) -> None:
        """Release what the evaluators hold."""
        for evaluator in self.evaluators:
            await evaluator.aclose()

    # --- helpers ------------------------------------------------------------------------

    def _count_skip(self, reason: str) -> None:
        counter = self._skip_counters.get(reason)
        if counter is None:
            # A plugin's SkipEvaluation can carry any string, even one built from the
            # event: a label value must stay a short code from a bounded set.
            if len(self._skip_counters) >= _MAX_SKIP_REASONS or not _REASON.fullmatch(reason):
                reason = "other"
                counter = self._skip_counters.get(reason)
            if counter is None:
                counter = self._skip_counters[reason] = \
                    self.metrics.events_skipped.labels(reason)
        counter.inc()

    def failed(self, event: TraceEvent, planned: Planned, error: str,
               judge: JudgeInfo | None = None) -> EvalResult:
        """The error result of ``planned`` on ``event`` (``record`` counts it as ``error``);
        see :func:`~evalstream.app.result_build.error_result`."""
        return error_result(event, planned, error, self._result_attributes, judge)

    def largest_error_results(self) -> list[EvalResult]:
        """Per configured evaluation, the largest error result :meth:`failed` can build
        (at its longest rate, when a route's strata give it several: ``widest_planned``).
        This bounds what stands in for a result the broker refuses (with that result's
        judge spend and, on a session route, which session it was), so
        ``kafka.max_request_size`` can be checked against it at start-up."""
        event, error, judge = widest_error_input(self._result_attributes)
        # A session route's stand-ins also say which session they stand in for.
        session = {"session": widest_stand_in_details()}
        largest = []
        for runtime in self._routes:
            # A rate of 0 publishes nothing (canaries included), and a result's rate is > 0.
            for planned in runtime.widest_planned():
                result = self.failed(event, planned, error, judge)
                if runtime.route.session is not None:
                    result = result.model_copy(update={"details": session})
                largest.append(result)
        return largest

    def record(self, planned: Planned, result: EvalResult) -> None:
        """Count a result of ``planned`` that is now durable: its outcome (``passed``,
        ``failed``, ``labelled`` or ``error``), score, label and lag.

        A canary's result is compared with its gold answer and counted in the calibration
        metrics instead: it is not traffic (only its spend and lag count as usual).
        """
        bound = planned.bound
        if planned.canary is not None:
            self._calibration.record(bound.route, bound.label, bound.judge, planned.canary,
                                     result)
            if result.status != "error":
                self._spend_and_lag(planned, result)
            else:
                self._spend(planned, result)
            return
        if result.status == "error":
            outcome = "error"
        else:
            passed = result.passed
            outcome = "labelled" if passed is None else ("passed" if passed else "failed")
        bound.outcomes[outcome](1)
        bound.weighted[outcome](planned.weight)
        # With the weighted sum, the effective sample size the Prometheus rules' Wilson
        # bounds use: results of one series may carry different rates (route strata).
        bound.weight_squared[outcome](planned.weight_squared)
        if outcome == "error":
            # A failed judge call may have been paid for (an unusable answer, retries that
            # were answered): its result carries that spend, counted as any other's.
            self._spend(planned, result)
            return
        if result.score is not None:
            bound.score_hist(result.score)
        if result.label is not None and bound.is_label:
            label = bound.labels(result.label)
            incs = bound.label_incs.get(label)
            if incs is None:  # bound once per value: a labels() lookup costs ~3x an inc
                m, names = self.metrics, (bound.route, bound.label, label)
                incs = bound.label_incs[label] = (m.labels.labels(*names).inc,
                                                  m.labels_weighted.labels(*names).inc)
            incs[0](1)
            incs[1](planned.weight)  # the label share's rules weight by 1/rate, as pass rates
        self._spend_and_lag(planned, result)

    @staticmethod
    def _spend(planned: Planned, result: EvalResult) -> None:
        """Count what the judge of ``result`` spent on it."""
        judge = result.judge
        if judge is not None and judge.cost_usd > 0.0:
            planned.bound.cost(judge.cost_usd)

    def _spend_and_lag(self, planned: Planned, result: EvalResult) -> None:
        self._spend(planned, result)
        event_time = result.event_time
        if event_time is not None:
            # From the event's time to the result's own time stamp (set when it was just
            # built), rather than reading the clock a second time.
            if event_time.tzinfo is None:
                event_time = event_time.replace(tzinfo=UTC)
            lag = (result.evaluated_at - event_time).total_seconds()
            self._lag(max(0.0, lag))

