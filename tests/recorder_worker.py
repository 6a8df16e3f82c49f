"""A worker process of an app that records ALIGN questions with a :class:`TraceRecorder` on scripted
models, for the tests that run several at once into one trace database (SQLite file or Postgres
URL).

    python tests/recorder_worker.py DB RUN_ID N [--hang-at I --marker FILE]

Asks questions ``q1`` .. ``qN`` ("What is i + i?", gold ``2i``) under ``question_id``s of their own;
one the run already answered (a rerun after a kill) is skipped (``QuestionRecordedError``). With
``--hang-at I``, question ``qI``'s first model call writes ``FILE`` and then blocks (the test kills
the process there). Prints ``done RECORDED SKIPPED`` at the end."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.recording import QuestionRecordedError, TraceRecorder
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("run_id")
    parser.add_argument("n", type=int)
    parser.add_argument("--hang-at", type=int, default=0)
    parser.add_argument("--marker", default="")
    args = parser.parse_args()

    def respond(chat: list[dict], index: int) -> str:
        i = int(re.search(r"What is (\d+) \+", chat[-1]["content"]).group(1))
        if i == args.hang_at:
            Path(args.marker).write_text("hanging")
            time.sleep(3600)
        return f"{i} + {i} = {2 * i}. The answer is {2 * i}."

    pool = ModelPool.from_chat_models({name: ScriptedChatModel(respond=respond) for name in "ab"})
    graph = build_delegation_graph().compile()
    context = DelegationContext(pool, {"n_agents": 2, "k_samples": 2})
    recorded = skipped = 0
    with TraceRecorder(args.db, run_id=args.run_id) as recorder:
        for i in range(1, args.n + 1):
            try:
                graph.invoke({"question": f"What is {i} + {i}?", "gold": str(2 * i), "question_id": f"q{i}"},
                             {"callbacks": [recorder]}, context=context)
                recorded += 1
            except QuestionRecordedError:
                skipped += 1
    print("done", recorded, skipped, flush=True)


if __name__ == "__main__":
    main()
