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
* The intervals and McNemar's test themselves (Wilson, Newcombe, Wald, Welch, bootstrap) live in
  :mod:`agora.agents.stats`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from agora.tasks.errors import InputError
from agora.agents.stats import bootstrap_ci, mcnemar_exact, mean_ci


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
        raise InputError(f"paired_difference needs outcomes on the same questions: {len(before)} vs {len(after)}")
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
            "gained": gained, "lost": lost, "mcnemar_p": mcnemar_exact(gained, lost)}


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


def _read_by(member: Any):
    """``text -> the text the protocol reads``: ``member``'s recipe's ``finish`` (program-of-thought runs
    the program), a failing recipe giving a text without an answer (as the pool does); identity
    without a recipe."""
    recipe = getattr(member, "recipe", None)
    if recipe is None or not recipe.applies(None):
        return lambda text: text

    def read(text: str) -> str:
        try:
            return recipe.finish(text).text
        except Exception as exc:  # noqa: BLE001 - a recipe's failure is this answer's, as in the pool
            return f"The recipe failed ({type(exc).__name__}), so this reply gives no answer."

    return read


def greedy_outcomes(problems: Sequence[Any], base: str, adapter: str | None, out_file: str | Path, *,
                    max_tokens: int = 256, shots: int = 2, batch_size: int = 8, threads: int | None = None,
                    dtype: str = "float32", progress: Any = None, backend: str = "transformers",
                    member: Any = None) -> list[dict[str, Any]]:
    """Greedy answers of ``base`` (+ ``adapter``) to ``problems``, one JSON line per question in
    ``out_file`` (``question_id``, ``answer``, ``correct``, ``completion_tokens``, ``finish_reason``,
    ``text``); questions already in the file are not redone. Returns the rows in ``problems`` order.

    ``member``: a pool member's spec (:class:`~agora.models.pool.ModelSpec`) to evaluate as the pool
    serves it: its system prompt and recipe frame the prompt
    (:func:`agora.training.own_samples.member_messages`) and its recipe reads the reply (a
    program-of-thought member's program is run); ``text`` is then the text read and ``reply`` the
    model's own. Without it, the weights under the plain solver prompt.

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
        raise InputError(f"backend {backend!r}: evaluation runs on 'transformers' or 'llamacpp'")

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
    read = _read_by(member)
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
                prompts = [solver_messages(p, shots) for p in batch]
                if member is not None:
                    from agora.training.own_samples import member_messages

                    prompts = [member_messages(member, m) for m in prompts]
                outs = generate(prompts)
                for p, o in zip(batch, outs):
                    text = read(o["text"])
                    found = find_answer(text, p.kind, p.n_choices or 4, question=p.question)
                    row = {"question_id": p.id, "answer": found.answer, "how": found.how,
                           "correct": int(bool(is_correct(found.answer, p.gold, p.kind))),
                           "completion_tokens": o["completion_tokens"], "finish_reason": o["finish_reason"],
                           "text": text, **({"reply": o["text"]} if text != o["text"] else {})}
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
