"""Conversational cue detectors: hedging, repair and challenge rates per 100 tokens.

Source: Zhang, Wang, Xue, Chu, "Post-Training Recipe, More Than Model Family, Shapes Multi-Agent
LLM Conversational Behavior", arXiv 2606.20632 (protocols.md §5, **reconstructed**): a response's
hedging rate ``h`` is its hedge cues per 100 tokens; repair and challenge rates are counted the
same way.

Tokens
    A *token* here is a word token, not a model token: a maximal run of letters or digits,
    apostrophes inside a word kept (``I'm``, ``don't``), lower-cased, with the typographic
    apostrophe ``’`` read as ``'``. ``3.5`` is two tokens, ``re-check`` is two. Model tokenizers
    differ between pool members, so counting with one word tokenizer keeps rates comparable across
    models. :func:`count_tokens` is the only token count used for rates.

Cues
    A :class:`LexiconDetector` counts non-overlapping phrase matches on the token sequence,
    scanning left to right and taking the longest phrase that starts at each position, so
    "it is possible that" counts once. The three lexicons were written for this project:

    * :data:`HEDGING` (validated on hand-written sentences with known counts,
      ``tests/test_behaviour.py``): epistemic modals and adverbs (*might*, *perhaps*, *probably*),
      shields (*I think*, *it seems*), approximators (*roughly*, *approximately*) and stated
      uncertainty (*not sure*).
    * :data:`REPAIR` (**exploratory**: only checked on a handful of sentences): self-corrections
      (*actually*, *wait*, *I mean*, *let me recheck*, *my mistake*).
    * :data:`CHALLENGE` (**exploratory**, same caveat): disagreement with another speaker
      (*I disagree*, *incorrect*, *that's wrong*, *however*).

    No phrase is in two lexicons. Lexicons miss paraphrases and count some literal uses (*may* the
    month, *wait* as a verb); read repair and challenge rates as rough signals.

Pluggable
    Anything with ``name``, ``exploratory`` and ``count(text) -> float`` is a
    :class:`CueDetector`; a classifier returning an expected cue count per response can replace a
    lexicon without touching the analysis (:mod:`agora.agents.panel`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable
from agora.tasks.errors import InputError

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def tokens(text: str) -> list[str]:
    """Word tokens of ``text`` (definition in the module docstring), lower-cased."""
    return _TOKEN.findall((text or "").lower().replace("\u2019", "'"))


def count_tokens(text: str) -> int:
    """Number of word tokens in ``text``: the denominator of every cue rate."""
    return len(tokens(text))


def rate_per_100(count: float, n_tokens: int) -> float:
    """Cues per 100 tokens: ``100 · count / n_tokens``; ``nan`` for an empty response (0 tokens)."""
    if n_tokens <= 0:
        return math.nan
    return 100.0 * count / n_tokens


@runtime_checkable
class CueDetector(Protocol):
    """A detector of one kind of conversational cue in a response."""

    name: str
    """Short name used as a column and a key (``hedging``)."""
    exploratory: bool
    """True when the detector has not been validated (reports say so)."""

    def count(self, text: str) -> float:
        """Number (or expected number) of cues in ``text``."""
        ...


@dataclass(frozen=True, slots=True)
class LexiconDetector:
    """Counts phrases of a lexicon, longest match first, without overlaps.

    Args:
        name: the cue's name.
        phrases: lexicon entries; each is tokenized with :func:`tokens`, so case, ``’`` and
            hyphens do not matter.
        exploratory: whether reports should mark the rate as exploratory.

    Raises:
        ValueError: an empty lexicon, or a phrase with no word tokens.
    """

    name: str
    phrases: tuple[str, ...]
    exploratory: bool = False
    _index: dict[str, tuple[tuple[str, ...], ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.phrases:
            raise InputError(f"LexiconDetector {self.name!r}: phrases is empty")
        index: dict[str, list[tuple[str, ...]]] = {}
        for phrase in self.phrases:
            toks = tuple(tokens(phrase))
            if not toks:
                raise InputError(f"LexiconDetector {self.name!r}: phrase {phrase!r} has no word tokens")
            index.setdefault(toks[0], []).append(toks)
        object.__setattr__(self, "_index", {
            first: tuple(sorted(set(entries), key=len, reverse=True)) for first, entries in index.items()})

    def matches(self, text: str) -> list[str]:
        """The matched phrases of ``text``, in order (for inspection and tests)."""
        toks = tokens(text)
        found, i = [], 0
        while i < len(toks):
            for phrase in self._index.get(toks[i], ()):
                if tuple(toks[i:i + len(phrase)]) == phrase:
                    found.append(" ".join(phrase))
                    i += len(phrase)
                    break
            else:
                i += 1
        return found

    def count(self, text: str) -> float:
        return float(len(self.matches(text)))


HEDGING = LexiconDetector("hedging", (
    # epistemic modals and adverbs
    "might", "may", "perhaps", "maybe", "possibly", "probably", "likely", "unlikely", "presumably",
    "apparently", "arguably", "seemingly", "conceivably", "could be", "could have",
    # approximators and frequency hedges
    "roughly", "approximately", "somewhat", "more or less", "sort of", "to some extent",
    "usually", "generally", "typically", "tend to", "tends to",
    # shields: the speaker frames the claim as belief or appearance
    "i think", "i believe", "i guess", "i suppose", "i assume", "i feel", "i suspect",
    "in my opinion", "in my view", "as far as i know", "to my knowledge", "if i'm not mistaken",
    "if i am not mistaken", "seems", "seem", "seemed", "appears to", "appear to", "appeared to",
    "suggests", "would suggest",
    # stated uncertainty
    "not sure", "not certain", "unsure", "uncertain", "it is possible", "it's possible",
    "there is a chance", "there's a chance",
))
"""Hedge cues (validated on hand-written sentences)."""

REPAIR = LexiconDetector("repair", (
    "actually", "wait", "oops", "sorry", "i mean", "i meant", "correction", "let me correct",
    "let me rephrase", "let me recalculate", "let me recheck", "let me re-check", "let me double-check",
    "let me reconsider", "on second thought", "i was wrong", "i made a mistake",
    "i made an error", "my mistake", "my apologies", "i apologize", "i stand corrected", "scratch that",
    "i miscalculated", "i misread", "to clarify",
), exploratory=True)
"""Self-repair cues (exploratory)."""

CHALLENGE = LexiconDetector("challenge", (
    "i disagree", "disagree", "i don't agree", "i do not agree", "incorrect", "not correct",
    "isn't correct", "is wrong", "are wrong", "that's wrong", "that is wrong", "not right",
    "isn't right", "you are mistaken", "you're mistaken", "however", "on the contrary", "not quite",
    "i don't think", "i do not think", "doesn't follow", "does not follow", "there is a mistake",
    "there's a mistake", "there is an error", "there's an error", "should be",
), exploratory=True)
"""Challenge cues: disagreement with another speaker (exploratory)."""

DEFAULT_DETECTORS: tuple[CueDetector, ...] = (HEDGING, REPAIR, CHALLENGE)
"""The detectors reports use unless told otherwise."""


@dataclass(frozen=True, slots=True)
class ResponseCues:
    """Cue counts and rates of one response."""

    tokens: int
    """Word tokens (:func:`count_tokens`)."""
    counts: Mapping[str, float]
    """Detector name → cues found."""
    rates: Mapping[str, float]
    """Detector name → cues per 100 tokens (``nan`` when ``tokens == 0``)."""


def measure(text: str, detectors: Sequence[CueDetector] = DEFAULT_DETECTORS) -> ResponseCues:
    """Cue counts and per-100-token rates of one response under each detector.

    Raises:
        ValueError: two detectors share a name.
    """
    names = [d.name for d in detectors]
    if len(set(names)) != len(names):
        raise InputError(f"detector names must be unique, got {names}")
    n = count_tokens(text)
    counts = {d.name: float(d.count(text)) for d in detectors}
    return ResponseCues(tokens=n, counts=counts, rates={k: rate_per_100(c, n) for k, c in counts.items()})
