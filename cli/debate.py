"""``agora run debate``: multi-agent debate on a benchmark, beside a vote on its first round. Its options
are :class:`~agora.agents.debate.DebateConfig`'s fields (``cli._run.benchmark_command``)."""

from __future__ import annotations

from agora.agents.debate import DebateConfig, agent_models
from agora.cli._run import benchmark_command
from agora.graphs.debate import METHODS, DebateContext

run_debate = benchmark_command(
    "debate", DebateConfig, context=DebateContext, check=agent_models, methods=METHODS, title="debate",
    short_help="Multi-agent debate: agents answer, read each other, answer again; beside a first-round vote.",
    help="Agents answer each problem alone, then read the others' answers and answer again for each later "
         "round; the last round's plurality is compared with the first round's (first_round_vote).",
    label=lambda config, names: (f"{config.agents} agents ({', '.join(agent_models(config, names))}) × "
                                 f"{config.rounds} rounds"),
)
