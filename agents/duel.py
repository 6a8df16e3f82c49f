"""Settings of a duel run, Sparta and Stackelberg modes (protocols.md §2; the graph is
:mod:`agora.graphs.duel`, the driver :func:`agora.runs.duel.run_duels`).
"""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Annotated, Any

from agora.agents._checks import DrawSeed, MaxTokens, Shots, Temperature, TopP
from agora.agents.exp3 import Exp3Config
from agora.agents.judge import JudgeConfig
from agora.agents.matching import MatchConfig, Mode
from agora.agents.reputation import ReputationConfig
from agora.models.validation import Choice, Count, Instance, settings


@settings
class DuelConfig:
    """Settings of a duel run; defaults from protocols.md §2."""

    mode: Annotated[Mode, Choice("sparta", "stackelberg")] = "stackelberg"
    """``stackelberg`` (EXP3 leader, annealed-gap matching) or ``sparta`` (uniform instructions,
    closest-reputation matching)."""
    duels: Annotated[int, Count(1)] = 64
    """``D``: duels per iteration."""
    iterations: Annotated[int, Count(1)] = 8
    """``T``: iterations (the schedules of ``g*`` run over them)."""
    seed: DrawSeed = 0
    """Seed of every draw (instruction, pairing, follower sampling)."""
    temperature: Temperature = 0.7
    """Followers' sampling temperature (a pool member's own ``temperature`` overrides it)."""
    top_p: TopP = 0.9
    """Followers' nucleus sampling mass, in (0, 1]."""
    max_tokens: MaxTokens = 256
    """Upper bound on a follower's answer, in tokens."""
    shots: Shots = 0
    """Worked exemplars in the followers' prompt (:func:`agora.agents.prompts.solver_messages`)."""
    judge: Annotated[JudgeConfig, Instance(JudgeConfig)] = field(default_factory=JudgeConfig)
    """How the other pool members judge both answers (1-10 scale, prompt shots, presentation)."""
    reputation: Annotated[ReputationConfig, Instance(ReputationConfig)] = field(default_factory=ReputationConfig)
    """The reputation update (Elo-like, with uncertainty) of the two followers after each duel."""
    leader: Annotated[Exp3Config, Instance(Exp3Config)] = field(default_factory=Exp3Config)
    """The leader's EXP3 bandit over instructions (exploration gamma, step eta, the g* schedule)."""
    match: Annotated[MatchConfig, Instance(MatchConfig)] = field(default_factory=MatchConfig)
    """How the matcher pairs two followers by reputation (random-pair share, opponents considered)."""

    def describe(self, n_instructions: int) -> dict[str, Any]:
        """The settings as stored with the run, with the step ``η`` actually used."""
        eta = self.leader.eta if self.leader.eta is not None else 1.0 / n_instructions
        return {**asdict(self), "eta_used": eta, "n_instructions": n_instructions}
