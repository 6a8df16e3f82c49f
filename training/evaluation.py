"""Before/after evaluation of a trained adapter: greedy accuracy per question and the paired difference.

* :func:`greedy_outcomes`: a model (base folder or ``builtin:...``, optional LoRA adapter) answers
  problems greedily through :class:`agora.models.hf_backend.TransformersChatModel`, the backend a
  ``backend = "transformers"`` pool entry uses (or, with ``backend="llamacpp"``, through a
  ``llamacpp`` entry: the GGUF plus the adapter converted to a GGUF LoRA), with the solver prompt of every protocol
  (:func:`agora.agents.prompts.solver_messages`), in left-padded batches; each batch's outcomes are
  appended to a JSONL file as it finishes, so an interrupted evaluation resumes where it stopped.
* :func:`paired_difference`: after − before on the same questions: the mean per-question
  difference with a normal-approximation (Wald) interval ``d̄ ± z·s_d/√n`` and a percentile
  bootstrap interval over questions (pairs kept), the discordant counts (``gained``: wrong → right,
  ``lost``: right → wrong) and McNemar's exact two-sided p-value on them.
* :func:`proportion_ci` (Wilson), :func:`proportion_difference` (Newcombe) and :func:`mean_ci` for
  per-iteration duel statistics.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any, Sequence

from agora.agents.stats import bootstrap_ci


def _z(level: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - level) / 2)


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean with a normal-approximation interval ``± z·s/√n`` (sample
    standard deviation, ``n − 1``); ``(nan, nan, nan)`` for no values, a zero-width interval for one."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    if n == 1:
        one = float(values[0])
        return one, one, one
    mean, var = _mean_var(values)
    half = _z(level) * math.sqrt(var / n)
    return mean, mean - half, mean + half


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample variance (``n − 1``) of two or more values."""
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def proportion_ci(successes: int, n: int, level: float = 0.95) -> tuple[float, float, float]:
    """``(share, low, high)`` with the Wilson score interval; ``(nan, nan, nan)`` for ``n = 0``."""
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    z = _z(level)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def proportion_difference(s1: int, n1: int, s2: int, n2: int, level: float = 0.95) -> tuple[float, float, float]:
    """``(p1 − p2, low, high)`` for two independent shares, Newcombe's hybrid score interval (from the two
    Wilson intervals); ``(nan, nan, nan)`` when either ``n`` is 0."""
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan"), float("nan")
    p1, l1, u1 = proportion_ci(s1, n1, level)
    p2, l2, u2 = proportion_ci(s2, n2, level)
    d = p1 - p2
    return d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def mean_difference(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean(a) − mean(b), low, high)`` for two independent samples, Welch's normal interval
    ``± z·√(s_a²/n_a + s_b²/n_b)`` (sample variances, ``n − 1``); ``(nan, nan, nan)`` when either has
    fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return float("nan"), float("nan"), float("nan")
    (ma, va), (mb, vb) = _mean_var(a), _mean_var(b)
    half = _z(level) * math.sqrt(va / len(a) + vb / len(b))
    return ma - mb, ma - mb - half, ma - mb + half


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: ``min(1, 2·P(X ≤ min(b, c)))`` for ``X ~ Bin(b + c, 1/2)``."""
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_difference(before: Sequence[int | bool], after: Sequence[int | bool], *, level: float = 0.95,
                      resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """After − before on the same questions (0/1 outcomes, same order).

    Returns a dict: ``n``, ``before``, ``after`` (accuracies), ``diff`` (mean difference),
    ``wald_low``/``wald_high`` (``diff ± z·s_d/√n``), ``boot_low``/``boot_high`` (percentile
    bootstrap, questions resampled with their pair), ``gained``, ``lost``, ``mcnemar_p``.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(before) != len(after):
        raise ValueError(f"paired_difference needs outcomes on the same questions: {len(before)} vs {len(after)}")
    b = [int(bool(x)) for x in before]
    a = [int(bool(x)) for x in after]
    d = [y - x for x, y in zip(b, a)]
    n = len(d)
    diff, wald_low, wald_high = mean_ci(d, level)
    _, boot_low, boot_high = bootstrap_ci(d, level=level, resamples=resamples, seed=seed)
    gained = sum(x == 1 for x in d)
    lost = sum(x == -1 for x in d)
    return {"n": n, "before": sum(b) / n if n else float("nan"), "after": sum(a) / n if n else float("nan"),
            "diff": diff, "wald_low": wald_low, "wald_high": wald_high, "boot_low": boot_low, "boot_high": boot_high,
            "gained": gained, "lost": lost, "mcnemar_p": mcnemar_exact_p(gained, lost)}


def _llamacpp_generate(base: str, adapter: str | None, max_tokens: int):
    """``generate(list of message lists) -> outputs`` on llama.cpp, through a one-member pool exactly as
    a ``backend = "llamacpp"`` entry with ``adapter`` serves it, one greedy request per question.
    (Decoding several questions in one llama.cpp batch was tried: 6.0 instead of 7.0 CPU-s per answer
    on the 0.5B with one thread, but 7 of 16 greedy answers then differed from the served ones.)"""
    from agora.models.convert import resolve_gguf
    from agora.models.pool import ModelPool, ModelSpec, PoolMember, SamplingParams, build_chat_model

    spec = ModelSpec(name="evaluated", backend="llamacpp", path=str(resolve_gguf(base)), adapter=adapter, n_ctx=4096)
    pool = ModelPool([PoolMember(spec, build_chat_model(spec))])
    params = SamplingParams(n=1, temperature=0.0, max_tokens=max_tokens, seed=0)

    def generate(batch):
        outs = []
        for messages in batch:
            samples, records = pool.sample("evaluated", messages, params)
            if records[-1]["error"] is not None or not samples:  # never scored: a failed call is not a wrong answer
                raise RuntimeError(f"llama.cpp evaluation call failed: {records[-1]['error']}")
            s = samples[0]
            outs.append({"text": s.text, "completion_tokens": s.completion_tokens, "finish_reason": s.finish_reason})
        return outs

    return generate


def greedy_outcomes(problems: Sequence[Any], base: str, adapter: str | None, out_file: str | Path, *,
                    max_tokens: int = 256, shots: int = 2, batch_size: int = 8, threads: int | None = None,
                    dtype: str = "float32", progress: Any = None, backend: str = "transformers") -> list[dict[str, Any]]:
    """Greedy answers of ``base`` (+ ``adapter``) to ``problems``, one JSON line per question in
    ``out_file`` (``question_id``, ``answer``, ``correct``, ``completion_tokens``, ``finish_reason``,
    ``text``); questions already in the file are not redone. Returns the rows in ``problems`` order.

    ``backend``: ``"transformers"`` (``base`` an HF folder or ``builtin:...`` dequantised, ``dtype``,
    left-padded batches of ``batch_size``) or ``"llamacpp"`` (``base`` a GGUF or built-in name, the
    peft ``adapter`` converted to a GGUF LoRA: the quantised model as the embedded pool serves it;
    one question at a time, llama.cpp threads from ``AGORA_LLAMA_THREADS``).

    Raises:
        ValueError: an unknown backend.
        RuntimeError: a llama.cpp call that failed after its retries (answers so far are kept).
    """
    from agora.models.llamacpp import default_threads
    from agora.agents.prompts import solver_messages
    from agora.tasks import find_answer, is_correct

    if backend not in ("transformers", "llamacpp"):
        raise ValueError(f"backend {backend!r}: evaluation runs on 'transformers' or 'llamacpp'")

    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    done: dict[str, dict[str, Any]] = {}
    if out_file.is_file():
        for line in out_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill: that question is redone
                    continue
                done[row["question_id"]] = row
    todo = [p for p in problems if p.id not in done]
    if todo:
        if backend == "llamacpp":
            generate = _llamacpp_generate(base, adapter, max_tokens)
        else:
            from agora.models.hf_backend import TransformersChatModel

            model = TransformersChatModel(model_path=base, adapter_path=adapter, max_tokens=max_tokens, dtype=dtype,
                                          threads=threads or default_threads())

            def generate(batch):
                return model.generate_texts(batch, temperature=0.0)
        with out_file.open("a", encoding="utf-8") as f:
            for i in range(0, len(todo), batch_size):
                batch = todo[i:i + batch_size]
                outs = generate([solver_messages(p, shots) for p in batch])
                for p, o in zip(batch, outs):
                    found = find_answer(o["text"], p.kind, p.n_choices or 4)
                    row = {"question_id": p.id, "answer": found.answer, "how": found.how,
                           "correct": int(bool(is_correct(found.answer, p.gold, p.kind))),
                           "completion_tokens": o["completion_tokens"], "finish_reason": o["finish_reason"],
                           "text": o["text"]}
                    done[p.id] = row
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                f.flush()
                if progress is not None:
                    progress(len(done), len(problems))
        del generate
        if backend == "transformers":
            del model
            from agora.models.hf_backend import load_model

            load_model.cache_clear()  # one evaluated model in memory at a time (fp32 0.5B: 2 GB)
    return [done[p.id] for p in problems]
