"""The model pool: :class:`ModelPool`, named members with retried, traced sampling (one call's
attempts: :mod:`agora.models.calls`). Pools are built from pool files or the built-in pools by
:mod:`agora.models.pool`."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Iterator, Sequence

from langchain_core.language_models import BaseChatModel

from agora.models.calls import SamplingCall, before_call
from agora.models.contract import Sample, SamplingParams
from agora.models.errors import MemberContractError, PoolConfigError, UnknownNameError
from agora.models.member import ModelSpec, PoolMember, _shown

class PythonObject:
    """Mixin for objects only Python callers can pass in a graph's run-time context (a pool, a
    router): pydantic takes an instance as is and gives JSON clients the schema ``null``, so
    LangGraph Studio can build the context schema of a graph whose context holds one."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.json_or_python_schema(json_schema=core_schema.none_schema(),
                                                 python_schema=core_schema.is_instance_schema(cls))


#: Questions in flight by default on the embedded llama.cpp pool (measured in
#: ``benchmarks/batched_sampling.py --mode engines``, benchmarks/README.md).
EMBEDDED_CONCURRENCY = 8


class ModelPool(PythonObject):
    """Named chat models, with retried, traced sampling.

    ``pool.sample(name, messages, params)`` returns ``params.n`` :class:`Sample` objects and the
    trace records of the call (one per sample, or one per failed attempt). Any LangChain
    ``BaseChatModel`` can be a member (tests use scripted fakes).
    """

    def __init__(self, members: Sequence[PoolMember], source: str = "<memory>"):
        if not members:
            raise PoolConfigError(f"{source}: the pool has no models")
        names = [m.name for m in members]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PoolConfigError(f"{source}: duplicate model names {dupes}")
        self._members = {m.name: m for m in members}
        self.source = source

    @classmethod
    def from_chat_models(cls, models: dict[str, BaseChatModel], **spec_fields: Any) -> "ModelPool":
        """A pool of ready models (LangChain chat models, or objects implementing the member contract,
        e.g. fakes in tests); specs say ``backend="langchain"``."""
        members = [PoolMember(ModelSpec(name=name, backend="langchain", **spec_fields), model)
                   for name, model in models.items()]
        return cls(members)

    @property
    def names(self) -> list[str]:
        return list(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[PoolMember]:
        return iter(self._members.values())

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def __getitem__(self, name: str) -> PoolMember:
        try:
            return self._members[name]
        except KeyError:
            raise UnknownNameError(f"model {name!r} is not in the pool ({', '.join(self._members)})") from None

    def describe(self) -> list[dict[str, Any]]:
        return [m.spec.describe() for m in self]

    def suggested_concurrency(self) -> int:
        """Questions to keep in flight when the user gives no ``--concurrency``:
        :data:`EMBEDDED_CONCURRENCY` when every member is an in-process llama.cpp model whose
        concurrent requests share decode batches (``batches_concurrent_requests``: the embedded
        pool's continuous batching), else 1 (a user's API model may be rate-limited; a served
        pool's best setting depends on its server: pass it)."""
        if all(getattr(m.sampler, "batches_concurrent_requests", False) for m in self):
            return EMBEDDED_CONCURRENCY
        return 1

    def with_members(self, members: Sequence[PoolMember]) -> "ModelPool":
        return ModelPool(list(self) + list(members), self.source)

    def sample(
        self,
        name: str,
        messages: Sequence[Any],
        params: SamplingParams = SamplingParams(),
        *,
        context: dict[str, Any] | None = None,
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """Sample ``params.n`` completions from model ``name``.

        Args:
            name: pool member name.
            messages: LangChain messages or ``{"role", "content"}`` dicts. The member's recipe
                (:mod:`agora.models.recipes`), if any and if it applies to ``context["role"]``,
                rewrites them first (program-of-thought: its own prompt) and turns each reply into
                the text returned (a program run, its printed result as ``The answer is ...``);
                then the member's ``system_prompt``, if any, is prepended.
            params: sampling settings; the member's ``temperature`` overrides ``params``.
            context: fields copied into each trace record (node, role, question_id, ...).

        Returns:
            ``(samples, records)``: the samples, and one trace record per sample plus one per
            failed attempt (``error`` set; a reply without any choice counts as a failed
            attempt). A model that fails ``max_retries + 1`` times gives no samples: the caller decides what a missing answer means. The prompt is stored once
            per request: the second and later samples' records have ``messages=None`` and
            ``messages_of`` = the first sample's ``call_id`` (graph state and its checkpoints do not
            repeat the prompt; :func:`agora.traces.store.call_rows` fills the messages back in).

        Raises:
            ModelCallError: the model is unreachable (:class:`ModelUnavailableError`) after its retries.
        """
        member = self[name]
        before_call(self, name)
        call = SamplingCall(member, messages, params, context)
        try:
            while (request := call.next_request()) is not None:
                start = time.perf_counter()
                try:
                    got = call.checked(call.sampler.sample(call.chat, request), request)
                except Exception as exc:  # noqa: BLE001 - classified once (agora.models.retry), logged, maybe retried
                    if wait := call.failed(exc, start):
                        time.sleep(wait)
                    continue
                call.received(got, start)
        except BaseException:  # ModelCallError, a cancellation, Ctrl-C: its failed attempts stay known
            call.unreturned()
            raise
        call.finish()
        return call.result()

    async def asample(
        self,
        name: str,
        messages: Sequence[Any],
        params: SamplingParams = SamplingParams(),
        *,
        context: dict[str, Any] | None = None,
    ) -> tuple[list[Sample], list[dict[str, Any]]]:
        """:meth:`sample` for async callers (async graph nodes): awaits the chat model's
        ``agenerate``, so the event loop runs other work meanwhile. Same arguments, results and errors.

        Backends without a native async path (llama.cpp, transformers, vLLM in-process, and the
        OpenAI-compatible backend's sync client) run in the event loop's default thread pool, as
        LangChain arranges: at most ``min(32, cpus + 4)`` calls of one loop at a time, unless the
        loop's default executor is larger (the runner's loops have 64 threads).
        """
        member = self[name]
        before_call(self, name)
        call = SamplingCall(member, messages, params, context)
        in_flight = None  # the start of the attempt awaiting its model, if one is
        try:
            while (request := call.next_request()) is not None:
                start = time.perf_counter()
                try:
                    pending = call.sampler.asample(call.chat, request)
                    if not inspect.isawaitable(pending):
                        raise MemberContractError(f"model {call.base['model']!r} (member {type(call.sampler).__name__}): "
                                                  f"asample() returned {_shown(pending)}, not an awaitable: define it "
                                                  "with async def (docs/models.md)")
                    in_flight = start
                    replied = await pending
                    in_flight = None
                    got = call.checked(replied, request)
                except Exception as exc:  # noqa: BLE001 - classified once (agora.models.retry), logged, maybe retried
                    in_flight = None
                    if wait := call.failed(exc, start):
                        await asyncio.sleep(wait)
                    continue
                call.received(got, start)
        except BaseException as exc:  # ModelCallError, a cancellation (a sibling node failed), Ctrl-C
            call.unreturned(in_flight if isinstance(exc, asyncio.CancelledError) else None)
            raise
        await call.afinish()
        return call.result()

