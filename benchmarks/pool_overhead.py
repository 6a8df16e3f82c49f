"""The pool's own cost per call, and the framework's per graph step, with a scripted instant model.

Issue 28 (one member contract, errors classified once, empty replies retried) changed the path
of every model call. This measures what that path costs when the model itself costs nothing:

* **per call**: ``ModelPool.sample`` (and ``asample``) of an instant model, n = 1 and n = 4, as
  microseconds per call: Agora's scripted fake (``ScriptedChatModel``, which implements the member
  contract itself) and a plain LangChain ``BaseChatModel`` (through the LangChain adapter);
* **per graph step**: a whole MoA question and a whole ALIGN question (``graph.invoke``) on
  instant models, divided by the node runs LangGraph reports (``stream_mode="updates"``): the
  framework overhead per graph step (goal: at most 1 ms).

Each figure is the mean over ``--rounds`` rounds (each of ``--calls`` calls, or ``--questions``
questions) with a 95 % t-interval over the round means.

    python benchmarks/pool_overhead.py                      # this checkout
    python benchmarks/pool_overhead.py --compare 00979c4    # also the commit before issue 28, side by side

``--compare REV`` checks ``REV`` out into a temporary git worktree and runs this script against it
and against this checkout in ``--pairs`` alternating subprocesses (``agora`` imported from the
worktree through a shim folder on ``PYTHONPATH``), so both versions meet the same machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("models", "agents", "graphs", "runs", "training", "tasks", "traces", "cli")


def instant_models():
    """``(scripted, plain)``: Agora's scripted fake and a minimal plain LangChain chat model."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from agora.models.testing import ScriptedChatModel

    class Plain(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "plain-instant"

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            usage = {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="The answer is B.",
                                                                            usage_metadata=usage))
                                           for _ in range(int(kwargs.get("n", 1)))])

    return ScriptedChatModel(responses=["The answer is B."], cycle=True), Plain()


def per_call(rounds: int, calls: int) -> dict[str, list[float]]:
    from agora.models.pool import ModelPool, SamplingParams

    scripted, plain = instant_models()
    pool = ModelPool.from_chat_models({"scripted": scripted, "plain": plain})
    chat = [{"role": "user", "content": "Which gas do plants absorb? A. O2 B. CO2"}]
    out = {}
    for name in ("scripted", "plain"):
        for n in (1, 4):
            params = SamplingParams(n=n, seed=1)
            for mode in ("sync", "async"):
                means = []
                for _ in range(rounds):
                    scripted.calls.clear()
                    if mode == "sync":
                        start = time.perf_counter()
                        for _ in range(calls):
                            pool.sample(name, chat, params, context={"node": "bench"})
                        means.append((time.perf_counter() - start) / calls * 1e6)
                    else:
                        async def run():
                            t0 = time.perf_counter()
                            for _ in range(calls):
                                await pool.asample(name, chat, params, context={"node": "bench"})
                            return time.perf_counter() - t0
                        means.append(asyncio.run(run()) / calls * 1e6)
                out[f"{name} n={n} {mode}"] = means[1:]  # round 0 warms up
    return out


def per_step(rounds: int, questions: int) -> dict[str, list[float]]:
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.moa import MoAContext, build_moa_graph
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    question = {"question": "Which gas do plants absorb?\nA. Oxygen\nB. Carbon dioxide\nC. Helium\nD. Neon",
                "question_id": "q1", "kind": "mc", "n_choices": 4, "gold": "B"}
    out = {}
    for name, graph, make in (
        ("moa", build_moa_graph().compile(), lambda pool: MoAContext(pool)),
        ("align", build_delegation_graph().compile(),
         lambda pool: DelegationContext(pool=pool, config=DelegationConfig(n_agents=2, k_samples=2))),
    ):
        per_step_us, steps_seen = [], 0
        for _ in range(rounds):
            models = {m: ScriptedChatModel(responses=["The answer is B."], cycle=True) for m in ("a", "b")}
            context = make(ModelPool.from_chat_models(models))
            steps = 0
            start = time.perf_counter()
            for _ in range(questions):
                steps += sum(1 for _ in graph.stream(question, context=context, stream_mode="updates"))
            per_step_us.append((time.perf_counter() - start) / steps * 1e6)
            steps_seen = steps // questions
        out[f"{name} ({steps_seen} node runs/question)"] = per_step_us[1:]
    return out


def measure(args) -> dict:
    """Round means (µs) of every figure, measured in this process."""
    import agora.models.pool as pool_module

    return {"source": str(Path(pool_module.__file__).resolve().parent.parent),
            "per_call_us": per_call(args.rounds, args.calls), "per_step_us": per_step(args.rounds, args.questions)}


def subprocess_measure(args, env: dict[str, str] | None = None, cwd: Path | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--json", "--rounds", str(args.rounds), "--calls",
           str(args.calls), "--questions", str(args.questions)]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=cwd)
    return json.loads(done.stdout.strip().splitlines()[-1])


def merge(into: dict | None, part: dict) -> dict:
    if into is None:
        return part
    for kind in ("per_call_us", "per_step_us"):
        for name, values in part[kind].items():
            into[kind].setdefault(name, []).extend(values)
    return into


def compare(rev: str, args) -> dict[str, dict]:
    """``--pairs`` alternating subprocess runs of ``rev`` (a temporary worktree) and this checkout,
    so that both meet the same machine load; their round means pooled per version."""
    work = Path(tempfile.mkdtemp(prefix="agora-before-"))
    tree, shim = work / "tree", work / "shim"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    before = after = None
    try:
        (shim / "agora").mkdir(parents=True)
        (shim / "agora" / "__init__.py").write_text("")
        for sub in SUBPACKAGES:
            (shim / "agora" / sub).symlink_to(tree / sub)
        env = {**os.environ, "PYTHONPATH": f"{shim}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        for _ in range(args.pairs):
            before = merge(before, subprocess_measure(args, env, work))
            after = merge(after, subprocess_measure(args, cwd=work))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    return {f"before ({rev})": before, "this checkout": after}


def show(title: str, results: dict[str, dict[str, list[float]]], unit: str) -> None:
    from agora.agents.stats import t_mean_ci as mean_ci

    names = list(next(iter(results.values())))
    print(f"\n{title}")
    print(f"{'':34s}" + "".join(f"{label:>26s}" for label in results))
    for name in names:
        cells = []
        for res in results.values():
            m, lo, hi = mean_ci(res[name]) if name in res else (float("nan"),) * 3
            cells.append(f"{m:9.1f} [{lo:7.1f}, {hi:7.1f}]")
        print(f"{name:34s}" + "".join(f"{c:>26s}" for c in cells))
    print(f"({unit}: mean [95 % t-interval] over the rounds' means)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per figure (the first warms up)")
    parser.add_argument("--calls", type=int, default=300, help="pool calls per round")
    parser.add_argument("--questions", type=int, default=20, help="graph questions per round")
    parser.add_argument("--compare", metavar="REV", help="also measure git revision REV (e.g. 00979c4)")
    parser.add_argument("--pairs", type=int, default=3, help="--compare: alternating runs of each version")
    parser.add_argument("--json", action="store_true", help="print one JSON line (used by --compare)")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args)))
        return
    results = compare(args.compare, args) if args.compare else {"this checkout": measure(args)}
    for label, res in results.items():
        print(f"{label}: agora from {res['source']}")
    show("pool.sample per call, instant model", {k: r["per_call_us"] for k, r in results.items()}, "µs per call")
    show("framework per graph step (node run), instant models", {k: r["per_step_us"] for k, r in results.items()},
         "µs per node run")


if __name__ == "__main__":
    main()
