"""``agora replay``: re-decide a recorded run under another selection rule or other parameters, with
zero model calls, and compare it with every method the run recorded (:mod:`agora.traces.replay`)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from agora.tasks.errors import InputError
from agora.cli._apps import app
from agora.cli._shared import Table, console, fmt_ci, fmt_pct, json_text, user_errors
from agora.traces.report import MIN_QUESTIONS, TOO_FEW
from agora.traces.replay import check_rule, paired_table, replay, reproduced, stale_scores
from agora.traces.replay_rules import RULES, Rule, model_principal, parse_params
from agora.traces.run_trace import load_run
from agora.traces.run_list import open_trace_store
from agora.traces.store import MAX_STORED_RUN_ID_CHARS, check_run_id


def _p(p: float) -> str:
    return f"{p:.3g}" if p >= 0.001 else f"{p:.1e}"


def rule_params(rule: Rule) -> str:
    """``rule``'s parameters as ``agora replay``'s listing shows them: ``name=default`` for each,
    ``params`` then ``optional`` ones (read, when not given, from the run's own settings; the
    listed default is what a run that recorded none uses), e.g. ``tau=0.5, proposal_rule='plurality',
    utility='agreement'``."""
    return ", ".join(f"{k}={v!r}" for k, v in {**rule.params, **rule.optional}.items())


def print_rules() -> None:
    """The registered selection rules with their parameters."""
    table = Table(title="selection rules (agora replay --rule NAME --param k=v)")
    for col in ("rule", "runs", "parameters (defaults; the run's own settings override them)", "reproduces", "what"):
        table.add_column(col)
    for r in sorted(RULES.values(), key=lambda r: r.name):
        table.add_row(r.name, ", ".join(r.protocols) or "any", escape(rule_params(r)) or "-",
                      ", ".join(f"{m} ({p})" for p, m in r.reproduces.items()) or "-",
                      escape(r.help) + (" [needs --dev-run-id]" if r.needs_dev else ""))
    console.print(table)


@app.command("replay", short_help="Re-decide a recorded run under another selection rule, with no model call.")
def replay_cmd(
    ctx: typer.Context,
    db: str = typer.Option("agora.db", "--db", help="Trace database (a SQLite file or a postgresql:// URL); "
                                                    "opened read-only."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="The recorded run to replay."),
    rule: Optional[str] = typer.Option(None, "--rule", help="Selection rule (without it: list the rules)."),
    param: Optional[list[str]] = typer.Option(None, "--param", help="A rule parameter k=v (repeatable), e.g. "
                                              "tau=0.9, proposal_rule=first, tau_hi=0.9."),
    dev_run_id: Optional[str] = typer.Option(None, "--dev-run-id", help="Run whose per-model accuracy weighs "
                                             "weighted_vote (a dev run, not the replayed one)."),
    questions: bool = typer.Option(False, "--questions", help="Also list each question: answer, correct, why."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object (rule, params, paired table, rows)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Bootstrap seed."),
) -> None:
    """Apply --rule to every recorded question of --run-id, score it against the stored gold with the
    task's scorer, and print the paired table against each recorded method: accuracies, difference
    (replay − method, pp) with a 95 % paired-bootstrap CI, wins/losses and the exact McNemar p. No
    model is called. Under the run's own settings a rule reproduces the method it names. A run with
    no successful model call is one line saying so (exit 0), not an empty table."""
    with user_errors():
        if rule is None:  # the rules are listed, but a --db or --run-id given is checked first
            if run_id is not None:
                check_run_id(run_id, max_chars=MAX_STORED_RUN_ID_CHARS)
            if run_id is not None or getattr(ctx.get_parameter_source("db"), "name", None) in ("COMMANDLINE", "ENVIRONMENT"):
                store = open_trace_store(db)
                if run_id is not None:
                    load_run(store, run_id)
            print_rules()
            return
        if run_id is None:
            raise InputError("--run-id: which run to replay (`agora report runs --db ...` lists them)")
        check_run_id(run_id, max_chars=MAX_STORED_RUN_ID_CHARS)
        if dev_run_id is not None:
            check_run_id(dev_run_id, "--dev-run-id", max_chars=MAX_STORED_RUN_ID_CHARS)
        if rule not in RULES:
            raise InputError(f"--rule {rule}: unknown; choose from {', '.join(sorted(RULES))}")
        store = open_trace_store(db)
        run = load_run(store, run_id)
        check_rule(run, rule)  # before its parameters: a COMED rule on an ALIGN run is refused as such
        params = parse_params(RULES[rule], param or [], run)
        dev = load_run(store, dev_run_id) if dev_run_id else None
        if not as_json and not any(q.samples for q in run.questions):  # the line alone, not an empty table
            # calls without a questions row: every question of the run failed (replay reads recorded questions)
            unread = 0 if run.questions or "model_calls" not in store.db.table_names() else store.db.execute(
                "select count(*) from model_calls where run_id = ? and error is null", [run_id]).fetchone()[0]
            why = (f"recorded no question: its {unread} successful model calls are of questions that failed (no "
                   "questions row, so no gold to score a replay against)" if unread
                   else "holds no successful model call")
            console.print(f"nothing to replay: run {escape(run_id)} ({escape(str(run.protocol))}, "
                          f"{len(run.questions)} questions) {why}", highlight=False, soft_wrap=True)
            return
        result = replay(run, rule, params, dev=dev)
        table = paired_table(run, result, seed=seed)
        method = RULES[rule].reproduces.get(run.protocol)
        same = reproduced(run, result, method) if method else None
        principal = model_principal(run, rule)
        if as_json:
            print(json_text({**result.to_json(), "protocol": run.protocol, "paired": table,
                             "reproduces": method, "identical": same,
                             **({"principal": principal} if principal else {})}, default=str))
            return
        shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "no parameters"
        console.print(f"replayed {escape(run_id)} ({escape(str(run.protocol))}, {len(run.questions)} questions) under "
                      f"[bold]{escape(rule)}[/bold] ({escape(shown)})" + (f", weights from {escape(dev_run_id)}" if dev_run_id
                                                                   else "") + ": 0 model calls", highlight=False)
        if principal:
            console.print(f"ALIGN's answers are the recorded answers of the run's model principal {escape(principal)} "
                          "(not asked again: replay calls no model)", highlight=False, soft_wrap=True)
        if same is not None and same[1]:
            console.print(f"answers identical to the recorded {escape(str(method))}: {same[0]}/{same[1]} questions",
                          highlight=False)
        if result.unavailable:
            first = next(r.unavailable for r in result.rows if r.unavailable)
            console.print(f"unavailable: {result.unavailable} questions (their trace lacks a branch this rule takes; "
                          f"e.g. {escape(first or '')}); left out of the pairs", highlight=False)
        out = Table(title=f"{escape(rule)} (replay) vs each recorded method: same questions, 95% paired-bootstrap CI")
        for col in ("vs", "questions", "replay %", "method %", "diff pp", "95% CI", "wins / losses", "McNemar p",
                    "note"):
            out.add_column(col, justify="left" if col in ("vs", "note") else "right", no_wrap=col in ("vs", "note"))
        for row in table:
            out.add_row(escape(row["method"]), str(row["questions"]), fmt_pct(row["replay_accuracy"]),
                        fmt_pct(row["method_accuracy"]), f"{100 * row['diff']:+.1f}",
                        fmt_ci(row["ci_low"], row["ci_high"]), f"{row['wins']} / {row['losses']}",
                        _p(row["p_mcnemar"]), TOO_FEW if row["too_few"] else "")
        stale, first = stale_scores(run)
        if stale:
            console.print(f"[yellow]warning:[/yellow] {stale} recorded results of run {escape(run_id)} are not scored "
                          f"as their answer scores against the stored gold now (first: question {escape(first or '')}; "
                          "was its gold edited after the run?): the table compares the replay, scored against the "
                          "gold as it is, with the recorded scores", highlight=False, soft_wrap=True)
        if table:
            console.print(out)
        elif not any(q.results for q in run.questions):  # (not an empty table)
            console.print(f"no paired table: run {escape(run_id)} records no method's results to compare with",
                          highlight=False, soft_wrap=True)
        else:
            console.print(f"no paired table: no question of run {escape(run_id)} is scored both by the replay and by "
                          "a recorded method (a question without a gold answer, or of a kind no scorer checks, is "
                          "unscored)", highlight=False, soft_wrap=True)
        if any(r["too_few"] for r in table):
            console.print(f"{TOO_FEW}: fewer than {MIN_QUESTIONS} paired questions or a degenerate interval; the "
                          "numbers are no finding", highlight=False)
        if questions:
            qt = Table(title="questions")
            for col in ("question", "answer", "correct", "why"):
                qt.add_column(col)
            for r in result.rows:
                qt.add_row(escape(r.question_id), escape(str(r.answer)), "-" if r.correct is None else str(r.correct),
                           escape(r.why))
            console.print(qt)
