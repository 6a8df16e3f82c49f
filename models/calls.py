"""One :meth:`agora.models.model_pool.ModelPool.sample` call: its attempts, retries, samples and
trace records (:class:`SamplingCall`), and :func:`unreturned_attempts`, which collects the failed
attempts of calls that raise or are cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, Sequence

from agora.models._chat import to_dicts
from agora.models.contract import Sample, SamplingParams
from agora.models.errors import EmptyResponseError, MemberContractError, ModelCallError
from agora.models.member import PoolMember, _shown
from agora.models.recipes.registry import Finished
from agora.models.retry import backoff_s, cause, is_transient, is_unreachable

log = logging.getLogger("agora.pool")

#: cancelled, while :func:`unreturned_attempts` collects them (``None``: nobody does).
_UNRETURNED: ContextVar[list[dict[str, Any]] | None] = ContextVar("agora_unreturned_attempts", default=None)


class _Sink(list):
    """The records :func:`unreturned_attempts` collects; ``in_flight``: the attempts in flight when
    their call was cancelled too; ``before_call``: asked before each call sends anything
    (:func:`before_call`)."""

    in_flight = False
    before_call: Callable[[Any, str], None] | None = None
    collected: Callable[[list[dict[str, Any]]], None] | None = None


@contextlib.contextmanager
def unreturned_attempts(*, in_flight: bool = False, before_call: Callable[[Any, str], None] | None = None,
                        collected: Callable[[list[dict[str, Any]]], None] | None = None
                        ) -> Iterator[list[dict[str, Any]]]:
    """Collect the failed-attempt trace records of model calls that do not return them.

    A call returns its records with its samples; one that raises :class:`ModelCallError` (an
    unreachable model) carries its own in ``exc.records``, but when several members are unreachable
    at once, a graph stops at the first error and cancels (or drops the errors of) the other
    calls of that step. Inside this context (and in asyncio tasks created inside it, which copy
    it), every call that raises or is cancelled adds its failed attempts (records with ``error``
    set) to the yielded list, so the runner stores every attempt that failed, not one member's.
    ``in_flight``: an async call cancelled while it waited for its model (``task.cancel()``,
    ``asyncio.wait_for``'s timeout) adds that attempt too, as a failed attempt whose ``error`` is
    ``"cancelled"`` (its reply never came). ``before_call(pool, name)``: called by every
    :meth:`ModelPool.sample` / ``asample`` inside the context before its first request is sent (a
    trace recorder checks there which pool the calls go to); what it raises is the call's error,
    and no request is made. ``collected(records)``: called with each call's failed attempts as they
    are added, in the call's own context, also after the context was left (a call of a task the
    context started, cancelled late): a trace recorder notes which graph run made the call, and
    writes the attempts that come after it recorded the invocation.
    """
    sink = _Sink()
    sink.in_flight = in_flight
    sink.before_call = before_call
    sink.collected = collected
    token = _UNRETURNED.set(sink)
    try:
        yield sink
    finally:
        _UNRETURNED.reset(token)


def before_call(pool: Any, name: str) -> None:
    """Before model ``name`` of ``pool`` is asked: the ``before_call`` of the innermost
    :func:`unreturned_attempts` context, if it has one (what it raises stops the call before any
    request)."""
    check = getattr(_UNRETURNED.get(), "before_call", None)
    if check is not None:
        check(pool, name)


def _started_at(start: float) -> str:
    """The wall-clock time of ``time.perf_counter()`` value ``start`` (when an attempt began), as
    ISO-8601 UTC with milliseconds: its trace row's ``created_at`` (the call's start, not the
    time the row is written)."""
    began = datetime.now(timezone.utc) - timedelta(seconds=time.perf_counter() - start)
    return began.isoformat(timespec="milliseconds")


class SamplingCall:
    """One :meth:`ModelPool.sample` call: its chat, settings, attempts, samples and trace records
    (shared by the sync and async paths, which differ only in how they wait).

    Attempts: an error is classified once (:func:`agora.models.retry.is_transient`): a transient
    one is retried after :func:`~agora.models.retry.backoff_s` (``Retry-After`` when the server
    gave one), a permanent one ends the call at once. Empty or null texts are failed samples: they
    are recorded as one failed attempt and asked for again, with seeds after those already used.
    """

    def __init__(self, member: PoolMember, messages: Sequence[Any], params: SamplingParams,
                 context: dict[str, Any] | None) -> None:
        spec = member.spec
        chat = to_dicts(messages)
        self.recipe = spec.recipe if spec.recipe is not None and spec.recipe.applies(context) else None
        if self.recipe is not None:
            chat = self.recipe.prepare(chat)
        if spec.system_prompt:
            chat = [{"role": "system", "content": spec.system_prompt}] + chat
        if spec.temperature is not None:
            params = replace(params, temperature=spec.temperature)
        self.member, self.sampler, self.chat, self.params = member, member.sampler, chat, params
        self.attempts, self.attempt, self.asked, self.done = spec.max_retries + 1, 0, 0, False
        self.base = {"model": spec.name, "messages": chat, "params": params.as_dict(), **(context or {})}
        if self.recipe is not None:
            self.base["recipe"] = self.recipe.name
        self.samples: list[Sample] = []
        self.records: list[dict[str, Any]] = []

    def next_request(self) -> SamplingParams | None:
        """The settings of the next attempt (the samples still missing, seeds after those used), or
        ``None`` when the call is over."""
        if self.done or self.attempt >= self.attempts:
            return None
        if not self.asked:
            return self.params
        seed = None if self.params.seed is None else self.params.seed + self.asked
        return replace(self.params, n=self.params.n - len(self.samples), seed=seed)

    def checked(self, samples: Any, request: SamplingParams) -> list[Sample]:
        """What a member returned for ``request``, checked against the member contract
        (docs/models.md, "What a member must support"): a list (or tuple) of :class:`Sample`, at
        most ``request.n`` of them (more: the first ``n`` are kept, said once per member).

        Raises:
            EmptyResponseError: none (zero choices), so the attempt is logged and retried.
            MemberContractError: not a list of :class:`Sample`, or fewer than ``request.n`` from a
                member that does not top up itself (``tops_up``): a permanent error, one failed
                attempt naming the member and what it returned.
        """
        name = self.base["model"]
        if type(samples) is not list:
            if not isinstance(samples, (list, tuple)):
                raise MemberContractError(f"model {name!r} (member {type(self.sampler).__name__}): sample() returned "
                                          f"{_shown(samples)}, not a list of agora.models.contract.Sample "
                                          "(docs/models.md)")
            samples = list(samples)
        for i, s in enumerate(samples):
            if not isinstance(s, Sample):
                raise MemberContractError(f"model {name!r} (member {type(self.sampler).__name__}): sample() returned "
                                          f"a list holding {_shown(s)} at index {i}, not an agora.models.contract."
                                          "Sample (docs/models.md)")
        n = request.n
        if not samples:
            raise EmptyResponseError(f"model {name!r} returned no samples (zero choices)")
        if len(samples) > n:
            self.member.say_once("too-many", logging.WARNING, "model %r (member %s): sample() returned %d samples for "
                                 "n=%d: the first %d are kept (a member returns exactly n; said once per member)",
                                 name, type(self.sampler).__name__, len(samples), n, n)
            return samples[:n]
        if len(samples) < n and not getattr(self.sampler, "tops_up", False):
            raise MemberContractError(f"model {name!r} (member {type(self.sampler).__name__}): sample() returned "
                                      f"{len(samples)} sample{'s' if len(samples) != 1 else ''} for n={n}; a member "
                                      "returns exactly n (or sets tops_up = True when it already asked its model "
                                      "again for the rest: docs/models.md)")
        return samples

    def _failure(self, attempt: int, error: str, start: float, **fields: Any) -> None:
        self.records.append({**self.base, "call_id": uuid.uuid4().hex, "attempt": attempt, "completion": None,
                             "prompt_tokens": 0, "completion_tokens": 0, "latency_s": time.perf_counter() - start,
                             "error": error[:2000], "created_at": _started_at(start), **fields})

    def failed(self, exc: Exception, start: float) -> float:
        """Record a failed attempt; the seconds to wait before the next one (0: none follows).

        Raises:
            ModelCallError: the last attempt failed because the model is unreachable
                (:func:`agora.models.retry.is_unreachable`).
        """
        name, attempt = self.base["model"], self.attempt
        self.attempt += 1
        self._failure(attempt, f"{type(exc).__name__}: {exc}", start)
        if not is_transient(exc):
            self.done = True
            self.member.say_once(f"permanent:{type(exc).__name__}", logging.ERROR,
                                 "model %r failed, not retried (a permanent error): %s", name, cause(exc))
            return 0.0
        log.warning("model %s failed (attempt %d/%d): %s", name, attempt + 1, self.attempts, cause(exc))
        if self.attempt < self.attempts:
            return backoff_s(attempt, exc)
        if is_unreachable(exc):
            raise ModelCallError(f"model {name!r} is unreachable after {attempt + 1} attempts: {cause(exc)}",
                                 self.records) from exc
        return 0.0

    def received(self, samples: list[Sample], start: float) -> None:
        """Record one attempt's samples; empty ones make a failed attempt and are asked for again."""
        name, attempt = self.base["model"], self.attempt
        self.attempt += 1
        self.asked += len(samples)
        created = _started_at(start)
        empty = 0
        for s in samples:
            if not s.text or not s.text.strip():
                empty += 1
                continue
            call_id = uuid.uuid4().hex
            known = s.usage != "unknown"
            record = {**self.base, "call_id": call_id, "attempt": attempt, "completion": s.text,
                      "prompt_tokens": s.prompt_tokens if known else None,
                      "completion_tokens": s.completion_tokens if known else None,
                      "latency_s": s.latency_s, "finish_reason": s.finish_reason, "error": None,
                      "created_at": created, "usage": s.usage, "seed": s.seed}
            if self.samples:  # later samples point at the first one's messages (see ModelPool.sample)
                record.update(messages=None, messages_of=self.samples[0].call_id)
            if not known:
                self.member.say_once("no-usage", logging.WARNING, "model %r reports no token usage: its samples' "
                                     "tokens are recorded as unknown (NULL), not 0", name)
            self.samples.append(Sample(s.text, name, s.prompt_tokens, s.completion_tokens, s.latency_s, s.finish_reason,
                                       s.logprob, s.top_logprobs, call_id, s.seed, s.usage))  # dataclasses.replace: 5x slower
            self.records.append(record)
        if not empty:
            self.done = True
            return
        log.warning("model %s gave %d empty or null repl%s of %d (attempt %d/%d)", name, empty,
                    "y" if empty == 1 else "ies", len(samples), attempt + 1, self.attempts)
        self._failure(attempt, f"EmptyResponseError: model {name!r} returned {empty} empty or null "
                      f"repl{'y' if empty == 1 else 'ies'} of {len(samples)}", start)

    def unreturned(self, in_flight: float | None = None) -> None:
        """The call ends without returning (it raised or was cancelled): its failed attempts go to
        the collecting :func:`unreturned_attempts`, if any. ``in_flight``: the ``perf_counter`` start
        of the attempt a cancellation cut short, added (error ``"cancelled"``) when the collector
        asked for those."""
        sink = _UNRETURNED.get()
        if sink is not None:
            if in_flight is not None and getattr(sink, "in_flight", False):
                self._failure(self.attempt, "cancelled", in_flight)
                self.attempt += 1
            failed = [r for r in self.records if r.get("error")]
            sink.extend(failed)
            if getattr(sink, "collected", None) is not None:
                sink.collected(failed)

    def finish(self) -> None:
        """Each sample's text after the member's recipe (a program-of-thought program run): the
        sample's text and its record's ``completion`` become the recipe's text, and the record gets
        the recipe's fields (``program``, ``program_output``, ``program_error``, ``program_s``)."""
        if self.recipe is None or not self.samples:
            return
        records = {r["call_id"]: r for r in self.records if not r.get("error")}
        for i, s in enumerate(self.samples):
            try:
                done = self.recipe.finish(s.text)
            except Exception as exc:  # noqa: BLE001 - a recipe's failure is this sample's, never the run's
                log.warning("model %s: recipe %s failed on a sample: %s", self.base["model"],
                            type(self.recipe).__name__, exc)
                error = f"RecipeError: {type(exc).__name__}: {exc}"[:2000]
                done = Finished("The recipe failed (RecipeError), so this reply gives no answer.", {"program_error": error})
            self.samples[i] = replace(s, text=done.text)
            record = records.get(s.call_id)
            if record is not None:
                record.update(completion=done.text, **done.fields)

    async def afinish(self) -> None:
        """:meth:`finish` off the event loop when the recipe runs programs."""
        if self.recipe is not None and self.samples and self.recipe.runs_programs:
            await asyncio.to_thread(self.finish)
        else:
            self.finish()

    def result(self) -> tuple[list[Sample], list[dict[str, Any]]]:
        if 0 < len(self.samples) < self.params.n and self.asked > len(self.samples):
            log.warning("model %s: %d of %d samples after %d attempts (the others were empty)",
                        self.base["model"], len(self.samples), self.params.n, self.attempt)
        return self.samples, self.records


# ----------------------------------------------------------------------------- pool files
