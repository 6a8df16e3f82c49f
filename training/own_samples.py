"""A member's own recorded samples, read back from any run's ``model_calls`` and scored by the
audited scorer: what :mod:`agora.training.verified` builds SFT rows and DPO pairs from.

Sources: STaR (Zelikman et al., arXiv 2203.14465) and RFT (Yuan et al., arXiv 2308.01825) fine-tune
a model on its own sampled answers that reach the gold answer; iterative RPO (Pang et al., arXiv
2404.19733) trains DPO on pairs of the model's own right and wrong answers to the same question.

**Where the samples come from.** Every run that answers questions records each sample as a
``model_calls`` row (the prompt the member saw, its completion, ``finish_reason``, the extracted
``answer`` and ``how``) beside the question's ``questions`` row (gold, kind, source). That holds for
ALIGN (role ``agent``), a bench's shared draws (the ``<bench>:<task>:candidates`` run, role
``candidate``; COMED and the other protocols of the bench draw from it without calls of their
own), COMED (``anchor``, and the peer ``probe``), MoA proposers, council members and debate's
first round. :func:`own_samples` reads them through the store's readers (``run_ids``,
``questions``, ``calls``) and keeps a call when:

* it is ``model``'s, succeeded, and answered the question alone: role in :data:`SOLVER_ROLES`,
  ``partner`` NULL (no other model's answer in its prompt), its completion is the model's own words
  (a member recipe that rewrites the reply, :func:`rewrites_reply`, such as program-of-thought's
  program result, leaves it out; one that only changes the prompt, a persona or a few-shot set,
  keeps it: the recorded prompt is the one the member saw), and its prompt is recorded;
* its question has a gold answer and a checker (``math`` or ``mc``; ``open`` questions are not
  verifiable; the samples of a question that failed, recorded without its ``questions`` row, have
  none either, also in a run that recorded calls but no question: all counted under ``no_gold``), a
  text (without one a question can be neither grouped nor held out by text: counted under
  ``no_prompt``), and is not held out (:class:`HeldOut`: by question id or by question text).

One question (its text, whitespace collapsed) recorded by two runs with golds the checker tells
apart is refused (:func:`check_golds`): its samples would be scored against two answers.

Each kept sample is scored with :func:`agora.tasks.scoring.score_answer` on the answer recorded with
it (re-extracted with :func:`agora.tasks.find_answer` where the database predates that column).

Held-out questions (:class:`HeldOut`) are never read; :func:`duel_samples` reads a member's
answers from duel rows the same way. :func:`scored_samples` reads every model's samples as the
protocols read them (an aggregator's candidates): a rewritten reply counts there, as the text a
protocol was shown.
"""

from __future__ import annotations

import functools
import hashlib
import json
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Sequence

import sqlite_utils

from agora.models.validation import Check, Rule, settings
from agora.tasks import find_answer
from agora.tasks.scoring import score_answer
from agora.traces.store import TraceStore

#: Roles whose calls answer the question from the solver prompt (see the module docstring).
SOLVER_ROLES = ("agent", "candidate", "anchor", "probe", "proposer", "member", "debater")


def normalise_question(text: str | None) -> str:
    """A question's text for matching held-out questions and grouping samples: Unicode NFC (a letter
    written as base and combining mark is the composed letter), whitespace collapsed, case kept."""
    return " ".join(unicodedata.normalize("NFC", text or "").split())


@functools.lru_cache(maxsize=8)
def _id_keys(ids: frozenset[str]) -> frozenset[str]:
    from agora.tasks.problem import id_key

    return frozenset(id_key(i) for i in ids)


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Questions no training row may come from: by id (compared as question ids are,
    :func:`agora.tasks.problem.id_key`: ``ｑ１`` is ``q1``), or by text (:func:`normalise_question`:
    whitespace- and Unicode-form-insensitive), so an evaluation set stays unseen whatever ids the
    runs gave its questions."""

    question_ids: frozenset[str] = frozenset()
    """Question ids as written (compared by :func:`agora.tasks.problem.id_key`)."""
    questions: frozenset[str] = frozenset()
    """Normalised question texts (:func:`normalise_question`)."""

    def excludes(self, question_id: str, question: str | None) -> bool:
        from agora.tasks.problem import id_key

        keys = _id_keys(self.question_ids)
        return (isinstance(question_id, str) and id_key(question_id) in keys) or normalise_question(question) in self.questions

    def __len__(self) -> int:
        return len(self.question_ids | self.questions)

    @classmethod
    def from_problems(cls, problems: Sequence[Any]) -> "HeldOut":
        """Held-out set of :class:`~agora.tasks.Problem` objects (their ids and texts)."""
        return cls(frozenset(p.id for p in problems), frozenset(normalise_question(p.question) for p in problems))

    @classmethod
    def from_file(cls, path: str | Path, fmt: str | None = None) -> "HeldOut":
        """A problem file (JSONL in any format :func:`agora.tasks.loaders.load_problems` reads: ids and
        texts) or a text file of question ids, one a line (``.txt``).

        The ids file is read as the problem files are: UTF-8 (a byte-order mark ignored), any line
        ending; its suffix in any case (``.TXT``).

        Raises:
            FileNotFoundError: no such file. TaskFormatError: a folder; a malformed problem file (one
            line naming file, line and field); an ids file without an id, in UTF-16 or another encoding than UTF-8,
            or whose lines are JSON objects (a problem file named ``.txt``: its ids would match nothing).
        """
        from agora.tasks.errors import not_utf8
        from agora.tasks.loaders import TaskFormatError, detect_format, load_problems

        path = Path(path)
        if path.is_dir():
            raise TaskFormatError(path, 0, None, "is a folder; give a held-out problem file (JSONL) or a .txt file of "
                                  "question ids")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such held-out question file")
        if path.suffix.lower() == ".txt":
            raw = path.read_bytes()
            utf16 = not_utf8(path, raw[:4096])
            if utf16 is not None:
                raise TaskFormatError(path, 1, None, utf16)
            ids = []
            for number, line in enumerate(raw.splitlines(), 1):
                try:
                    text = line.decode("utf-8-sig" if number == 1 else "utf-8").strip()
                except UnicodeDecodeError as exc:
                    raise TaskFormatError(path, number, None, f"not UTF-8 text (byte {exc.start + 1} of the line)"
                                          ) from None
                if text.startswith("{"):
                    raise TaskFormatError(path, number, None, "a JSON object, not a question id: a problem file "
                                          "is read by its ids and texts when it is named .jsonl")
                ids.append(text)
            if not any(ids):  # (an empty problem file is refused as 'file has no records': so is this)
                raise TaskFormatError(path, 0, None, "no question ids (the file is empty or every line blank): "
                                      "nothing would be held out")
            return cls(frozenset(i for i in ids if i))

        return cls.from_problems(load_problems(path, fmt or detect_format(path)))


def length_ratio_rule(owner: str = "") -> Check:
    """The rule of a ``length_ratio`` setting (longer over shorter side of a preference pair): 0 (no
    length filter) or a ratio >= 1. ``owner`` (``"EvolveConfig."``) prefixes the field in the refusal,
    a ``ValueError`` such as ``"length_ratio must be >= 1 (or 0: no filter), got 0.5"``."""
    return Rule(lambda v: v == 0 or v >= 1, owner + "length_ratio must be >= 1 (or 0: no filter), got {value}")


@settings
class VerifiedConfig:
    """Whose samples, from which runs, and how they become rows."""

    model: str
    """The pool member whose own answers are read (and who is trained on them)."""
    run_ids: tuple[str, ...] = ()
    """Runs to read; empty reads every run of the database."""
    held_out: HeldOut = field(default_factory=HeldOut)
    length_ratio: Annotated[float, length_ratio_rule()] = 1.5
    """Longest side over shortest side a pair may have (0: no length filter)."""
    max_pairs_per_question: Annotated[int, Rule(lambda v: v >= 1, "max_pairs_per_question must be >= 1, got {value}")] = 4
    max_sft_per_question: Annotated[int, Rule(lambda v: v >= 1, "max_sft_per_question must be >= 1, got {value}")] = 4
    explicit_only: bool = True
    """A chosen / SFT answer must state its answer explicitly (not a ``fallback`` guess)."""

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings (the held-out set by size), for the dataset record."""
        d = asdict(self)
        d["held_out"] = {"question_ids": len(self.held_out.question_ids), "questions": len(self.held_out.questions)}
        d["run_ids"] = list(self.run_ids)
        return d


@dataclass(frozen=True, slots=True)
class OwnSample:
    """One scored sample of the member, as read back from the trace."""

    call_id: str
    model: str
    run_id: str
    question_id: str
    task: str
    """The bench task of a bench's run (``<bench>:<task>:...``), else the question's source (dataset
    name), else its kind."""
    question: str
    gold: str
    kind: str
    messages: tuple[dict[str, str], ...]
    text: str
    answer: str | None
    how: str | None
    correct: bool
    finished: bool
    """The model stopped by itself (``finish_reason`` is not ``length``)."""
    tokens: int | None
    """Completion tokens as recorded (None: unknown)."""
    n_choices: int = 4
    """Options of an ``mc`` question."""

    @property
    def group(self) -> str:
        """Question text and prompt: the samples that answer the same prompt."""
        blob = json.dumps([normalise_question(self.question), list(self.messages)], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    @property
    def usable(self) -> bool:
        return self.correct and self.finished


def _decode(value: Any) -> Any:
    if value in (None, ""):
        return None
    return json.loads(value) if isinstance(value, str) else value


def _messages(value: Any) -> tuple[dict[str, str], ...] | None:
    try:
        messages = _decode(value)
    except ValueError:
        return None
    if not isinstance(messages, list) or not messages:
        return None
    out = []
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return None
        out.append({"role": m["role"], "content": m["content"]})
    return tuple(out) if out[-1]["role"] == "user" else None


def _count(value: Any) -> int | None:
    """A recorded token count, or ``None`` where the row holds anything but a whole number >= 0 (a
    hand-made database's text or float): lengths are then compared in characters."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _bench_task(store: TraceStore, run_id: str) -> str | None:
    """The task of a bench's run (ids ``<bench>:<task>:<protocol>``, its dataset naming the bench), else ``None``."""
    row = store.get_run(run_id) or {}
    try:
        dataset = json.loads(row.get("dataset") or "null")
    except (TypeError, ValueError):
        return None
    parts = run_id.split(":")
    if isinstance(dataset, dict) and dataset.get("bench") and len(parts) >= 3 and parts[0] == dataset["bench"]:
        return parts[1]
    return None


def rewrites_reply(recipe: str) -> bool:
    """Whether the member recipe called ``recipe`` (a ``model_calls.recipe`` value) replaces the
    model's reply with text of its own (:meth:`agora.models.recipes.Recipe.finish` overridden:
    program-of-thought writes the program and its printed result), so that the recorded completion
    is not the model's words. A recipe not installed here counts as rewriting."""
    from agora.models.recipes import Recipe, get_recipe

    try:
        cls = get_recipe(recipe)
    except KeyError:
        return True
    return cls.finish is not Recipe.finish


def member_messages(spec: Any, messages: Sequence[dict[str, str]], role: str | None = None) -> list[dict[str, str]]:
    """The chat pool member ``spec`` is sent for a protocol's ``messages`` in a call of trace role
    ``role``, as :class:`agora.models.calls.SamplingCall` builds it: its recipe's
    :meth:`~agora.models.recipes.Recipe.prepare` (when the recipe applies to ``role``), then its
    ``system_prompt`` first. The duels table keeps the protocol's prompt; the member saw this one."""
    chat = [{"role": m["role"], "content": m["content"]} for m in messages]
    recipe = getattr(spec, "recipe", None)
    if recipe is not None and recipe.applies({"role": role} if role else None):
        chat = recipe.prepare(chat)
    if getattr(spec, "system_prompt", None):
        chat = [{"role": "system", "content": spec.system_prompt}] + chat
    return chat


def own_samples(db: str | Path | TraceStore | sqlite_utils.Database, cfg: VerifiedConfig
                ) -> tuple[list[OwnSample], dict[str, int]]:
    """``cfg.model``'s verifiable samples in the runs ``cfg.run_ids`` (all runs when empty), scored,
    by run, question order and call, and how many calls were left out and why
    (``{"held_out", "no_gold", "not_solver", "recipe", "no_prompt"}``: the module docstring)."""
    return scored_samples(db, (cfg.model,), cfg.run_ids, cfg.held_out, own_words=True)


def scored_samples(db: str | Path | TraceStore | sqlite_utils.Database, models: Sequence[str] = (),
                   run_ids: Sequence[str] = (), held_out: HeldOut = HeldOut(), *, own_words: bool = False
                   ) -> tuple[list[OwnSample], dict[str, int]]:
    """As :func:`own_samples`, for the samples of ``models`` (every model when empty). ``own_words``
    leaves out the calls whose recipe rewrote the reply (:func:`rewrites_reply`; counted under
    ``recipe``); without it their completion, the text the protocol read, is the sample's."""
    store = TraceStore.reading(db)
    rewriting: dict[str, bool] = {}
    tables = set(store.db.table_names())
    skipped = {"held_out": 0, "no_gold": 0, "not_solver": 0, "recipe": 0, "no_prompt": 0}
    if not {"runs", "model_calls"} <= tables:
        return [], skipped
    # (no questions table: every question of every run failed; their calls count under no_gold below)
    runs = list(dict.fromkeys(run_ids)) or store.run_ids()  # a run named twice is read once
    wanted = set(models)
    out: list[OwnSample] = []
    for run_id in runs:
        questions = {q["question_id"]: q for q in store.questions(run_id)} if "questions" in tables else {}
        # (a run with calls and no questions row, every question failed, counts its calls under no_gold below)
        order = {qid: n for n, qid in enumerate(questions)}
        bench_task = _bench_task(store, run_id)
        calls = [c for c in store.calls(run_id) if (not wanted or c.get("model") in wanted)
                 and c.get("error") is None and isinstance(c.get("completion"), str) and c["completion"].strip()]
        # a failed question's samples (recorded without its questions row): no gold to score them against
        skipped["no_gold"] += sum(c.get("question_id") not in questions for c in calls)
        calls = [c for c in calls if c.get("question_id") in questions]
        calls.sort(key=lambda c: (order[c["question_id"]], c.get("created_at") or "", c.get("sample_index") or 0,
                                  c["call_id"]))
        for c in calls:
            q = questions[c["question_id"]]
            kind = q.get("kind") or "math"
            if c.get("role") not in SOLVER_ROLES or c.get("partner"):
                skipped["not_solver"] += 1
                continue
            recipe = c.get("recipe")
            if own_words and recipe and recipe not in rewriting:
                rewriting[recipe] = rewrites_reply(recipe)
            if own_words and recipe and rewriting[recipe]:
                skipped["recipe"] += 1
                continue
            if q.get("gold") is None or kind not in ("math", "mc"):
                skipped["no_gold"] += 1
                continue
            if held_out.excludes(q["question_id"], q.get("question")):
                skipped["held_out"] += 1
                continue
            messages = _messages(c.get("messages"))
            if messages is None or not isinstance(q.get("question"), str) or not q["question"].strip():
                # (without the question's text it can be neither grouped nor held out by text)
                skipped["no_prompt"] += 1
                continue
            text = c["completion"].strip()
            if c.get("how") is not None:  # extracted when the question was recorded
                answer, how = c.get("answer"), (None if c["how"] == "none" else c["how"])
            else:  # a database from before the answer columns
                found = find_answer(text, kind, q.get("n_choices") or 4, question=q.get("question"))
                answer, how = found.answer, (found.how if found.answer is not None else None)
            gold = q["gold"] if isinstance(q["gold"], str) else str(q["gold"])  # (a number in a hand-made DB)
            answer = answer if answer is None or isinstance(answer, str) else str(answer)
            out.append(OwnSample(
                call_id=c["call_id"], model=c["model"], run_id=run_id, question_id=q["question_id"],
                task=bench_task or q.get("source") or kind,
                question=q["question"], gold=gold, kind=kind, messages=messages, text=text,
                answer=answer, how=how, correct=bool(score_answer(answer, gold, kind)),
                finished=c.get("finish_reason") != "length", tokens=_count(c.get("completion_tokens")),
                n_choices=q.get("n_choices") or 4))
    check_golds(out)
    return out, skipped


def check_golds(samples: Sequence[OwnSample]) -> None:
    """Refuse samples of one question (its text, whitespace collapsed) that carry two golds the checker
    tells apart (or two kinds): two runs that recorded the same question with different answers would
    train the member on both, and score one run's answers against the other's gold.

    Raises:
        InputError: naming the question, both golds and their runs."""
    from agora.tasks.errors import InputError

    first: dict[str, OwnSample] = {}
    for s in samples:
        f = first.setdefault(normalise_question(s.question), s)
        if f is not s and (f.kind != s.kind or (f.gold != s.gold and not score_answer(str(s.gold), str(f.gold), f.kind))):
            text = normalise_question(s.question)
            raise InputError(f"question {text[:60] + ('...' if len(text) > 60 else '')!r} has gold {f.gold!r} "
                             f"({f.kind}) in run {f.run_id!r} (question id {f.question_id!r}) and {s.gold!r} "
                             f"({s.kind}) in run {s.run_id!r} (question id {s.question_id!r}); read the runs that agree "
                             "(--source-run) or hold the question out (--held-out)")


def duel_samples(duels: Sequence[dict[str, Any]], model: str, spec: Any = None) -> list[OwnSample]:
    """``model``'s answers in duel rows (:func:`agora.training.datasets.load_duels`: ``prompt_messages``
    decoded) as scored samples: the rows with a gold answer and a checker, each side the model played,
    scored by :func:`agora.tasks.scoring.score_answer` on the extracted answer the duel recorded.

    ``spec``, the member's pool spec: each sample's prompt is the one the member saw
    (:func:`member_messages`, role ``follower``: its recipe's prompt and its system prompt), and a
    member whose recipe rewrites the reply (:func:`rewrites_reply`: the duel recorded the recipe's
    text, not the model's) has no samples. Without it, the duel's prompt as recorded.

    The duels table keeps no token counts or ``finish_reason``: lengths are characters and every
    answer counts as finished. Samples group by instruction and prompt as :func:`own_samples`' do."""
    recipe = getattr(spec, "recipe", None)
    if recipe is not None and recipe.applies({"role": "follower"}) and rewrites_reply(recipe.name):
        return []
    out = []
    for d in duels:
        kind = d.get("kind") or "math"
        if d.get("gold") is None or kind not in ("math", "mc"):
            continue
        messages = _messages(d.get("prompt_messages"))
        if messages is None:
            continue
        if spec is not None:
            messages = tuple(member_messages(spec, messages, "follower"))
        for side in ("a", "b"):
            text = (d.get(f"answer_{side}") or "").strip()
            if d.get(f"model_{side}") != model or not text:
                continue
            answer = d.get(f"extracted_{side}")
            how = find_answer(text, kind).how if answer is not None else None
            out.append(OwnSample(
                call_id=f"{d['duel_id']}:{side}", model=model, run_id=d["run_id"],
                question_id=d.get("instruction_id") or d["duel_id"], task=kind, question=d.get("instruction") or "",
                gold=d["gold"], kind=kind, messages=messages, text=text, answer=answer, how=how,
                correct=bool(score_answer(answer, d["gold"], kind)), finished=True, tokens=None))
    return out
