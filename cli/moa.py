"""``agora run moa``: Mixture-of-Agents on a benchmark, beside a vote on the same proposals. Its options
are :class:`~agora.agents.moa.MoAConfig`'s fields (``cli._run.benchmark_command``)."""

from __future__ import annotations

from agora.agents.moa import MoAConfig, check_pool
from agora.cli._run import benchmark_command
from agora.graphs.moa import METHODS, MoAContext

run_moa = benchmark_command(
    "moa", MoAConfig, context=MoAContext, check=check_pool, methods=METHODS, title="MoA",
    short_help="Mixture-of-Agents: every model proposes, one aggregates; beside a vote on the proposals.",
    help="Each proposer answers every problem alone, the aggregator reads all proposals and answers; "
         "compare with the plurality of the same proposals (proposal_vote).",
    label=lambda config, names: f"{len(config.proposers or names)} proposers, aggregator {config.aggregator or names[0]}",
)
