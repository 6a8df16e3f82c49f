"""``agora report runs`` (every run in a trace database, with its status and what it recorded), ``agora
report run`` (one run at a glance) and ``agora report question`` (one question's candidates and choices)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import typer
from rich.markup import escape

from agora.cli._apps import report_app
from agora.cli._shared import Table, console, fmt_ci, fmt_pct, json_text, user_errors
from agora.cli.comed import print_comed_decisions
from agora.models.urls import shown_url
from agora.traces.comed import comed_summary
from agora.traces.members import has_recipes, member_rows
from agora.traces.question_report import question_report
from agora.traces.report import TOO_FEW, disagreements, unknown_tokens_note
from agora.traces.run_list import open_trace_store, run_rows, run_summary
from agora.tasks.errors import InputError
from agora.traces.store import MAX_STORED_RUN_ID_CHARS, check_run_id


@report_app.command("runs", short_help="Every run in a trace DB: protocol, status, questions recorded, accuracy.")
def report_runs(
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    stale_after: float = typer.Option(60.0, "--stale-after", min=0.0, help="Minutes without recorded activity (a "
                                      "question, a model call) after which a 'running' run is flagged as probably killed."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per run instead of the table."),
) -> None:
    """List the runs of --db (oldest first): run id, protocol, status, questions recorded, main-method
    accuracy, start, last activity. A run left 'running' with no activity for --stale-after minutes
    was most likely killed (kill -9, a crash): rerun it with its --run-id to resume. An SQLite file
    without Agora's runs table is refused (exit 2), and opened read-only: nothing is written to it."""
    with user_errors():
        rows = run_rows(open_trace_store(db), stale_after_s=stale_after * 60)
        if as_json:
            for r in rows:
                print(json_text(asdict(r)))
            return
        if not rows:  # the message alone, not an empty table above it
            console.print(f"no runs in {escape(shown_url(str(db)))}", highlight=False, soft_wrap=True)
            return
        table = Table(title=f"runs in {escape(shown_url(str(db)))}")
        for col in ("run id", "protocol", "status", "questions", "accuracy %", "started", "last activity"):
            # a run id is what a user copies into --run-id: folded onto more lines, never cut with "…"
            # (no minimum width: one the other columns cannot leave it crops the table's right side)
            table.add_column(col, justify="right" if col in ("questions", "accuracy %") else "left")
        for r in rows:
            status = (r.status or "unknown") + (" (stale)" if r.stale else "")  # (NULL: a dropped status column added back)
            table.add_row(escape(r.run_id), escape(str(r.protocol)), escape(status), str(r.questions),
                          "-" if r.accuracy is None else fmt_pct(r.accuracy), r.started_at or "-",
                          r.last_activity or "-")
        console.print(table)
        if any(r.stale for r in rows):
            console.print(f"stale: 'running' with nothing recorded for over {stale_after:g} min, so probably killed "
                          "(kill -9, a crash); rerun it with its --run-id to resume", highlight=False, soft_wrap=True)


def _short(text: str | None, width: int = 60) -> str:
    one = " ".join((text or "").split())
    return one if len(one) <= width else one[: width - 1] + "…"


@report_app.command("run", short_help="One run at a glance: methods with CIs, cost, how answers were found.")
def report_run(
    run_arg: Optional[str] = typer.Argument(None, metavar="[RUN_ID]",
                                            help="The run (see `agora report runs`); or give it as --run-id."),
    run_opt: Optional[str] = typer.Option(None, "--run-id", help="The run, as every report subcommand takes it."),
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object instead of the tables."),
    disagree: Optional[tuple[str, str]] = typer.Option(
        None, "--disagree", metavar="METHOD METHOD",
        help="Also list the questions on which these two methods answered differently (id, gold, each "
             "answer and whether it is right); JSON key 'disagree'."),
) -> None:
    """A compact summary of one run: status, questions, model calls and tokens (its own, and those it
    took from a bench's shared candidates, counted apart), each method's accuracy
    with its 95 % CI ("too few questions" under 30 scored questions or with a degenerate interval), how
    the samples' answers were found, and on how many questions the methods disagree. A COMED run
    adds its decisions' shares (accept, verify, escalate) and its rescues and harms, as `agora run
    comed` prints them."""
    with user_errors():
        if run_arg is not None and run_opt is not None and run_arg != run_opt:
            raise InputError(f"RUN_ID {run_arg!r} and --run-id {run_opt!r} name different runs: give one")
        if run_arg is None and run_opt is None:
            raise InputError("no run given: `agora report run --run-id RUN_ID` (see `agora report runs`)")
        run_id = run_opt if run_opt is not None else run_arg
        check_run_id(run_id, "--run-id" if run_opt is not None else "RUN_ID", max_chars=MAX_STORED_RUN_ID_CHARS)
        if disagree and disagree[0] == disagree[1]:
            raise InputError(f"--disagree {disagree[0]} {disagree[1]}: the same method twice; name two different "
                             "methods (a method never disagrees with itself)")
        store = open_trace_store(db)
        s = run_summary(store, run_id)
        members = member_rows(store, run_id) if has_recipes(store, run_id) else []  # a pool with recipes
        comed = (comed_summary(store, run_id)  # (its rescue–harm compares the anchor's answers with COMED's)
                 if s["protocol"] == "comed" and {"comed", "anchor"} <= {m.method for m in s["methods"]} else None)
        pairs = disagreements(store, run_id, *disagree) if disagree else None
        if as_json:
            extra = {"members": [asdict(m) for m in members]} if members else {}
            if comed is not None:
                extra["comed"] = {"decisions": comed.decisions, "outcomes": comed.outcomes,
                                  "rescue_harm": asdict(comed.rescue_harm)}
            if pairs is not None:
                extra["disagree"] = pairs
            print(json_text({**s, "methods": [{**asdict(m), "too_few": m.too_few} for m in s["methods"]], **extra},
                            default=str))
            return
        t = s["totals"]
        console.print(f"run [bold]{escape(run_id)}[/bold]: {s['protocol']}, {s['status']}; {int(t['questions'])} "
                      f"questions recorded, {int(t['failed_questions'])} failed; {int(t['calls'])} model calls "
                      f"(one per sample; {int(t['failed'])} failed attempts), {int(t['completion_tokens'])} generated "
                      f"tokens{unknown_tokens_note(t)}, {t['wall_s']:.1f} s question time (summed over questions, which may overlap); started {s['started_at']} on {s['host'] or '?'} at "
                      f"{s['code_revision'] or '?'}", highlight=False, soft_wrap=True)
        sh = s["shared"]
        if sh["shared_from"]:
            who = "its agents" if s["protocol"] == "align" else "its anchor" if s["protocol"] == "comed" else "it"
            console.print(f"shared: {int(sh['shared_calls'])} model calls, {int(sh['shared_completion_tokens'])} "
                          f"generated tokens taken by {who} from the bench's shared candidates "
                          f"({escape(sh['shared_from'])}; counted there, not in its own calls above; each method's "
                          "share is its 'shared/q' column)", highlight=False, soft_wrap=True)
        with_shared = any(m.shared_samples_per_question for m in s["methods"])
        table = Table(title="methods")
        for col in ("method", "questions", "accuracy %", "95% CI", "samples/q", *(["shared/q"] if with_shared else []),
                    "gen. tokens", "failed", "guessed", "note"):
            table.add_column(col, justify="left" if col in ("method", "note") else "right",
                             no_wrap=col in ("method", "note"))
        for m in s["methods"]:
            table.add_row(m.method, str(m.questions), fmt_pct(m.accuracy), fmt_ci(m.ci_low, m.ci_high),
                          f"{m.samples_per_question:.1f}",
                          *([f"{m.shared_samples_per_question:.1f}"] if with_shared else []),
                          str(m.completion_tokens), str(m.failed), str(m.guessed), _method_note(m))
        console.print(table)
        hows = s["sample_answers"]
        if hows:
            total = sum(hows.values())
            console.print("samples' answers found by: " + ", ".join(f"{h} {n} ({100 * n / total:.0f}%)"
                                                                  for h, n in hows.items()), highlight=False)
            if hows.get("echo"):
                console.print(f"[yellow]warning:[/yellow] {hows['echo']} samples only repeat the question (echo): "
                              "no answer, scored wrong, whatever number the question names (docs/scoring.md)",
                              highlight=False)
        console.print(f"questions where the methods disagree: {s['questions_methods_disagree']}", highlight=False)
        if comed is not None:
            print_comed_decisions(comed)
        if pairs is not None:
            a, b = disagree
            table = Table(title=f"questions where {escape(a)} and {escape(b)} answer differently: {len(pairs)}")
            for col in ("question", "gold", a, b):
                table.add_column(escape(col))
            mark = {True: " (right)", False: " (wrong)", None: ""}
            for p in pairs:
                table.add_row(escape(str(p["question_id"])), escape(str(p["gold"] if p["gold"] is not None else "-")),
                              *(escape(str(p[m]["answer"])) + mark[p[m]["correct"]] for m in (a, b)))
            console.print(table)
        if members:
            table = Table(title="members (weights × recipe; per-sample accuracy over every node's samples, a failed "
                                "program's sample left out: it is a failure, not a wrong answer)")
            for col in ("member", "recipe", "samples", "answered", "accuracy % (right/answered)",
                        "programs failed", "program s (median)"):
                table.add_column(col, justify="left" if col in ("member", "recipe") else "right", no_wrap=True)
            for m in members:
                failed = f"{m.program_failures} of {m.programs}" if m.programs else "-"
                seconds = f"{m.program_s_median:.3f}" if m.program_s_median is not None else "-"
                table.add_row(escape(m.model), escape(m.recipe or "- (chain-of-thought)"), str(m.samples),
                              str(m.answered),
                              f"{fmt_pct(m.answered_accuracy)} ({m.correct}/{m.scored - m.scored_failures})",
                              failed, seconds)
            console.print(table)


@report_app.command("question", short_help="One question: every candidate, its answer, and what each method chose.")
def report_question(
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    run_id: str = typer.Option(..., "--run-id", help="The run."),
    question_id: str = typer.Option(..., "--question-id", help="The question (its id in the task file)."),
    full: bool = typer.Option(False, "--full", help="Print every sample's whole completion."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object instead of the tables."),
) -> None:
    """Every sample of one recorded question (node, role, agent, model, sample index, extracted answer,
    how it was found, right or wrong, votes for its answer) and every method's answer with why it chose
    it (the selection rule's reasoning, replayed from the traces)."""
    with user_errors():
        check_run_id(run_id, max_chars=MAX_STORED_RUN_ID_CHARS)
        r = question_report(open_trace_store(db), run_id, question_id)
        if as_json:
            print(json_text(r, default=str))
            return
        if r["failed"]:
            console.print(f"[bold]{escape(question_id)}[/bold] in {escape(run_id)} ({r['protocol']}): failed, no "
                          f"answer recorded: {len(r['failed_attempts'])} failed attempts, {r['successful_calls']} "
                          "successful calls; rerun the run with its --run-id to retry it", highlight=False,
                          soft_wrap=True)
            _print_failed_attempts(r["failed_attempts"], full)
            return
        opts = f", {r['n_choices']} options" if r["n_choices"] else ""
        console.print(f"[bold]{escape(question_id)}[/bold] in {escape(run_id)} ({r['protocol']}; {r['kind']}{opts}; "
                      f"gold {escape(str(r['gold']))})", highlight=False)
        console.print(escape(_short(r["question"], 300)), highlight=False, soft_wrap=True)
        cand = Table(title="candidates (samples in call order)")
        for col in ("#", "node", "role", "agent", "model", "sample", "answer", "how", "right", "votes", "partner",
                    "completion"):
            cand.add_column(col, justify="right" if col in ("#", "agent", "sample", "votes") else "left")
        for i, c in enumerate(r["samples"]):
            node = (c["node"] or "-") + (" *" if c.get("shared_from") else "")
            cand.add_row(str(i), node, c["role"] or "-", "-" if c["agent"] is None else str(c["agent"]),
                         escape((c["model"] or "-") + (f" [{c['recipe']}]" if c.get("recipe") else "")),  # member [recipe]
                         "-" if c["sample_index"] is None else str(c["sample_index"]),
                         escape(str(c["answer"])), c["how"] or "-",
                         "failed" if c.get("program_failed") else "-" if c["correct"] is None
                         else ("yes" if c["correct"] else "no"), str(c["votes"]),
                         escape(c["partner"] or "-"),
                         escape(c["completion"] or "" if full else _short(c["completion"], 40)))
        console.print(cand)
        shared = sorted({c["shared_from"] for c in r["samples"] if c.get("shared_from")})
        if shared:
            console.print(f"* taken from the bench's shared candidates: the row is in {escape(', '.join(shared))} "
                          "(node candidates, role candidate); node and role as the protocol saw it", highlight=False,
                          soft_wrap=True)
        if r["failed_attempts"]:
            _print_failed_attempts(r["failed_attempts"], full)
        meth = Table(title="methods: what each chose and why")
        for col in ("method", "answer", "right", "how", "samples", "why"):
            meth.add_column(col)
        for m in r["methods"]:
            meth.add_row(m["method"], escape(str(m["answer"])), "-" if m["correct"] is None else
                         ("yes" if m["correct"] else "no"), m["how"] or "-", str(m["samples"]), escape(m["why"]))
        console.print(meth)
        for note in r["notes"]:
            console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)


def _print_failed_attempts(rows: list[dict], full: bool) -> None:
    """The failed model calls of a question: model, error class, message, attempt (1 first, as the
    run's log counts them; the trace and ``--json`` keep the stored 0-based value)."""
    table = Table(title="failed attempts (model calls with an error, in call order)")
    for col in ("#", "node", "role", "agent", "model", "attempt", "error class", "message"):
        table.add_column(col, justify="right" if col in ("#", "agent", "attempt") else "left")
    for i, f in enumerate(rows):
        table.add_row(str(i), escape(f["node"] or "-"), escape(f["role"] or "-"),
                      "-" if f["agent"] is None else str(f["agent"]), escape(f["model"] or "-"),
                      "-" if f["attempt"] is None else str(f["attempt"] + 1), escape(f["error_class"] or "-"),
                      escape(f["message"] or "" if full else _short(f["message"], 200)))
    console.print(table)


def _method_note(m) -> str:
    """The methods table's note: too few scored questions, and how many answers were unscored (a run
    without gold answers: each method's questions are 0, for want of a gold, not of questions)."""
    unscored = f"{m.unscored} unscored (no gold answer)" if m.unscored else ""
    if m.questions == 0 and unscored:
        return unscored
    return "; ".join(x for x in (TOO_FEW if m.too_few else "", unscored) if x)
