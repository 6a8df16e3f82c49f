"""Settings of a duel run, Sparta and Stackelberg modes (protocols.md §2; the graph is
:mod:`agora.graphs.duel`, the driver :func:`agora.runs.duel.run_duels`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agora.agents._checks import check_count, check_sampling
from agora.agents.exp3 import Exp3Config
from agora.agents.judge import JudgeConfig
from agora.agents.matching import MatchConfig, Mode
from agora.agents.reputation import ReputationConfig


@dataclass(frozen=True, slots=True)
class DuelConfig:
    """Settings of a duel run; defaults from protocols.md §2."""

    mode: Mode = "stackelberg"
    """``stackelberg`` (EXP3 leader, annealed-gap matching) or ``sparta`` (uniform instructions,
    closest-reputation matching)."""
    duels: int = 64
    """``D``: duels per iteration."""
    iterations: int = 8
    """``T``: iterations (the schedules of ``g*`` run over them)."""
    seed: int = 0
    """Seed of every draw (instruction, pairing, follower sampling)."""
    temperature: float = 0.7
    """Followers' sampling temperature (a pool member's own ``temperature`` overrides it)."""
    top_p: float = 0.9
    """Followers' nucleus sampling mass, in (0, 1]."""
    max_tokens: int = 256
    """Upper bound on a follower's answer, in tokens."""
    shots: int = 0
    """Worked exemplars in the followers' prompt (:func:`agora.agents.prompts.solver_messages`)."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    """How the other pool members judge both answers (1-10 scale, prompt shots, presentation)."""
    reputation: ReputationConfig = field(default_factory=ReputationConfig)
    """The reputation update (Elo-like, with uncertainty) of the two followers after each duel."""
    leader: Exp3Config = field(default_factory=Exp3Config)
    """The leader's EXP3 bandit over instructions (exploration gamma, step eta, the g* schedule)."""
    match: MatchConfig = field(default_factory=MatchConfig)
    """How the matcher pairs two followers by reputation (random-pair share, opponents considered)."""

    def __post_init__(self):
        if self.mode not in ("sparta", "stackelberg"):
            raise ValueError(f"DuelConfig.mode must be 'sparta' or 'stackelberg', got {self.mode!r}")
        for name in ("duels", "iterations"):
            check_count("DuelConfig", name, getattr(self, name))
        check_sampling("DuelConfig", self)
        for name, kind in (("judge", JudgeConfig), ("reputation", ReputationConfig), ("leader", Exp3Config),
                           ("match", MatchConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"DuelConfig.{name} must be a {kind.__name__}, got {getattr(self, name)!r}")

    def describe(self, n_instructions: int) -> dict[str, Any]:
        """The settings as stored with the run, with the step ``η`` actually used."""
        eta = self.leader.eta if self.leader.eta is not None else 1.0 / n_instructions
        return {**asdict(self), "eta_used": eta, "n_instructions": n_instructions}
