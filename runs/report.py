"""The bench report as a reader sees it: the claims, ``bench.md``, ``accuracy_vs_tokens.png`` and ``bench.json``.

:mod:`agora.traces.bench` reads a bench's runs back from the trace store into the report's data
(:func:`agora.traces.bench.bench_report`: cells, paired differences, costs, COMED's decisions, the
pool); this module adds the report's claims (:func:`claims`, the rules of
:mod:`agora.runs.bench_claims`, computed from that data and the per-question pairs
:func:`agora.traces.bench.macro_pair` reads) and writes the three files (:func:`write_report`): the
markdown page (:func:`report_markdown`, its figures as :mod:`agora.runs.report_format` writes them), the JSON of the data
(:func:`agora.traces.bench_spec.report_json`) and one PNG (:func:`plot_accuracy_vs_tokens`: accuracy
against generated tokens per question, with each task's Pareto front, :func:`pareto_front`).

Layers: ``runs`` (above ``graphs`` and ``traces``). Rendering and plotting sit here, beside the
driver that produces the runs, and not in ``traces/``: ``traces`` stays the store and its readers
(no matplotlib, no markdown tables, tests/test_layers.py), and the claims are a judgment on the
data (which methods to compare, what counts as holding), not a reading of it.
"""

from __future__ import annotations

import itertools

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from agora.runs.bench_claims import CLAIMS
from agora.runs.report_members import members_markdown
from agora.runs.report_format import (any_too_few, claim_qualifier, fmt_accuracy, fmt_ci, fmt_few, fmt_num, fmt_p,
                                      fmt_pct, fmt_thresholds, fmt_tokens, principal_line, single_model_rows)
from agora.traces.bench import bench_report
from agora.traces.bench_data import BenchData, read_bench
from agora.traces.bench_spec import BenchSpec, record_bench, report_json
from agora.traces.report import MIN_QUESTIONS, TOO_FEW
from agora.traces.store import TraceStore

# ---------------------------------------------------------------------------------------- the claims


def claims(report: dict[str, Any], spec: BenchSpec, data: BenchData, *, seed: int = 0) -> list[dict[str, Any]]:
    """The report's claims, measured (whatever the numbers are): one row per claim with
    ``claim`` (text), ``value`` (a difference in accuracy, 0..1 scale), ``ci_low``/``ci_high`` (95 %
    bootstrap), ``p_mcnemar`` (``None`` when unpaired), ``questions`` and ``holds`` (``yes``, ``no``,
    ``undecided``, ``-``). A claim on fewer than :data:`MIN_QUESTIONS` paired questions, or with a
    degenerate interval, ``holds`` "too few questions" (:data:`TOO_FEW`), never yes or no."""
    return [row for claim in CLAIMS for row in claim(report, spec, data, seed)]


def build_report(store: TraceStore, spec: BenchSpec, *, seed: int = 0) -> dict[str, Any]:
    """The whole report, as ``bench.json`` holds it: :func:`agora.traces.bench.bench_report`'s data
    with its ``claims`` (:func:`claims`) last. ``seed`` fixes every bootstrap."""
    data = read_bench(store, spec)
    report = bench_report(store, spec, seed=seed, data=data)
    report["claims"] = claims(report, spec, data, seed=seed)
    return report


# ---------------------------------------------------------------------------- markdown


# Each figure reads as :mod:`agora.runs.report_format` writes it, here and on the console.


def report_markdown(report: dict[str, Any]) -> str:
    """The report as a markdown page (``bench.md``)."""
    tasks = [t["name"] for t in report["tasks"]]
    cells = {(c["task"], c["method"]): c for c in report["cells"]}
    macro = {m["method"]: m for m in report["macro"]}
    lines = [f"# Bench `{report['bench_id']}`", ""]
    if not report["complete"]:
        left = "; ".join(f"{t} {p}: {r['missing']}" for t, per in report["runs_done"].items() for p, r in per.items()
                         if r["missing"])
        lines += ["**Incomplete**: some test questions have not run yet (" + left + "); rerun `agora bench` with the "
                  "same `--run-id` to finish (nothing finished is redone).", ""]
    lines += [f"Generated {report['generated_at']}. Accuracies in %, with {int(100 * report['level'])} % "
              f"percentile-bootstrap CIs ({report['resamples']} resamples, seed {report['seed']}); the macro-average is "
              "the mean over tasks, its CI resamples each task within itself. Failed questions (every model call "
              "failed) and method failures (the method got no sample) are counted apart, never as wrong.", ""]
    lines += ["## Tasks", "", "| task | file | format | test questions | runs |", "|---|---|---|---|---|"]
    for t in report["tasks"]:
        lines.append(f"| {t['name']} | `{t['path']}` | {t['format']} | {t['questions']} | "
                     + ", ".join(f"`{r}`" for r in t["runs"].values()) + " |")
    settings = report.get("settings") or {}
    if settings.get("pool"):
        lines += ["", "Pool: " + ", ".join(f"`{m}`" for m in settings["pool"]) + "."]
    for key in ("align", "comed"):
        if settings.get(key):
            lines += ["", f"{key.upper()} settings: " + ", ".join(f"{k} = {v}" for k, v in settings[key].items()) + "."]
    if principal_line(report):
        lines += ["", principal_line(report, "`") + "."]
    if settings.get("router_left_out"):
        lines += ["", "Members left out of `comed_routed`'s router (no scored dev answer): "
                  + "; ".join(f"{task}: " + ", ".join(f"`{m}`" for m in members)
                              for task, members in settings["router_left_out"].items()) + "."]

    lines += ["", "## Accuracy", "", "| method | " + " | ".join(tasks) + " | macro |",
              "|---|" + "---|" * (len(tasks) + 1)]
    for m in report["methods"]:
        if not any((t, m) in cells for t in tasks):
            continue
        row = [fmt_accuracy(cells[t, m]) if (t, m) in cells else "-" for t in tasks]
        mac = macro.get(m)
        row.append("-" if mac is None else f"**{fmt_pct(mac['accuracy'])}** {fmt_ci(mac['ci_low'], mac['ci_high'])}{fmt_few(mac)}"
                   + ("" if mac["all_tasks"] else " (not every task)"))
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    if report["macro_single_models"]:
        for s, row in single_model_rows(report, tasks):
            lines.append(f"| model `{s['model']}` (one sample) | " + " | ".join(row)
                         + f" | **{fmt_pct(s['accuracy'])}** {fmt_ci(s['ci_low'], s['ci_high'])}{fmt_few(s)} |")
        pooled = bool((report.get("settings") or {}).get("shared"))
        lines += ["", "A model's one-sample row is the share of its samples that are right (its expected accuracy "
                  "from one temperature sample): "
                  + ("its k samples in the shared candidate pool, on the candidates run's questions."
                     if pooled else "its ALIGN candidates, on the ALIGN run's questions.")]
    if any_too_few(report):
        lines += ["", f"† {TOO_FEW}: fewer than {MIN_QUESTIONS} scored questions, or a degenerate interval "
                  "(every resample equal); the number is shown, but it is no finding."]
    lines += ["", "Questions scored / failed per cell:", "", "| method | " + " | ".join(tasks) + " |",
              "|---|" + "---|" * len(tasks)]
    for m in report["methods"]:
        if any((t, m) in cells for t in tasks):
            lines.append(f"| {m} | " + " | ".join(
                f"{cells[t, m]['questions']} / {cells[t, m]['failed_questions'] + cells[t, m]['method_failed']}"
                + (f" ({cells[t, m]['missing']} not run)" if cells[t, m]["missing"] else "")
                if (t, m) in cells else "-" for t in tasks) + " |")

    lines += ["", "## Paired differences", "",
              "Same questions, both methods scored: difference in accuracy (pp) with a 95 % paired-bootstrap CI, "
              "wins/losses (questions only one of the two got right) and the exact McNemar p-value (two-sided "
              "binomial test on the discordant pairs); `macro` pools the tasks (mean of per-task differences, "
              "McNemar on all discordant pairs).", "",
              "| method | vs | task | questions | diff pp | 95% CI | wins / losses | McNemar p | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in report["paired"]:
        lines.append(f"| {p['method']} | {p['baseline']} | {p['task']} | {p['questions']} | {fmt_pct(p['diff'])} | "
                     f"{fmt_ci(p['ci_low'], p['ci_high'])} | {p['wins']} / {p['losses']} | {fmt_p(p['p_mcnemar'])} | "
                     f"{TOO_FEW if p.get('too_few') else ''} |")

    lines += ["", "## Cost per question", "",
              "Model calls are requests (N samples of one prompt are one call); tokens are generated tokens; model "
              "seconds sum the latencies of the samples a method drew on; wall seconds are the question time of the "
              "run that computed the method (methods of one run share it).", "",
              "| method | task | calls/q | samples/q | gen. tokens/q | model s/q | wall s/q (run) |",
              "|---|---|---|---|---|---|---|"]
    for m in report["methods"]:
        for t in tasks + ["macro"]:
            c = macro.get(m) if t == "macro" else cells.get((t, m))
            if c is not None:
                lines.append(f"| {m} | {t} | {fmt_num(c['calls_per_q'])} | {fmt_num(c['samples_per_q'])} | "
                             f"{fmt_tokens(c['tokens_per_q'])} | {fmt_num(c['model_s_per_q'])} | {fmt_num(c['wall_s_per_q'])} |")

    lines += _shared_markdown(report, tasks, cells, macro)
    lines += members_markdown(report)

    lines += ["", "## Shared samples", "", "| method | draws on |", "|---|---|"]
    lines += [f"| {m} | {report['sharing'].get(m, '-')} |" for m in report["methods"]]

    lines += ["", "## COMED thresholds", ""]
    if not report["calibration"]:
        lines.append("No COMED run.")
    for c in report["calibration"]:
        t = c["thresholds"]
        scope = "all tasks" if c["scope"] == "*" else f"task {c['scope']}"
        lines.append(f"- {scope}: {fmt_thresholds(t)} (N = {c['n_anchor']}); {c['source']}")
    for key, title in (("comed", "COMED decisions, rescues and harms"),
                       ("comed_routed", "COMED with the routed anchor (`comed_routed`): decisions, rescues and harms")):
        if not report.get(key):
            continue
        lines += ["", f"## {title}", "",
                  "| task | questions | accept | verify | escalate | verify → accept | verify → escalate | escalated | "
                  "rescues | harms | Acc(COMED) − Acc(anchor) pp |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in report[key]:
            n = c["questions"] or 1
            d, o = c["decisions"], c["outcomes"]
            lines.append(f"| {c['task']} | {c['questions']} | " + " | ".join(
                f"{d[k]} ({fmt_pct(d[k] / n)}%)" for k in ("accept", "verify", "escalate"))
                + f" | {o['verify_accept']} | {o['verify_escalate']} | {c['escalated']} | {c['rescues']} | {c['harms']} | "
                  f"{fmt_pct(c['gain'])} |")
        lines += ["", "Acc(COMED) − Acc(anchor) = (rescues − harms) / questions, checked on every question"
                  + (" (the anchor: the routed one's plurality over its N samples)." if key == "comed_routed" else ".")]

    if report["claims"]:
        lines += ["", "## Claims", "", "| claim | value pp | 95% CI | McNemar p | paired questions | holds |",
                  "|---|---|---|---|---|---|"]
        for c in report["claims"]:
            lines.append(f"| {c['claim']}{claim_qualifier(c)} | {fmt_pct(c['value'])} | {fmt_ci(c['ci_low'], c['ci_high'])} | "
                         f"{fmt_p(c['p_mcnemar'])} | {c.get('questions', '-')} | {c['holds']} |")
        lines += ["", "`yes`: the whole 95 % CI is on the claim's side; `undecided`: the estimate is, the CI is not; "
                  "`no`: the estimate is not (or, for COMED, the calls or rescues part fails); "
                  f"`{TOO_FEW}`: fewer than {MIN_QUESTIONS} paired questions, or a degenerate interval: no verdict."]
    if report["failed_questions"]:
        lines += ["", "## Failed questions", "", "Every model call of these questions failed: they are not scored; a "
                  "rerun with the same `--run-id` retries them.", ""]
        for t, per in report["failed_questions"].items():
            for p, ids in per.items():
                lines.append(f"- {t} / {p}: {len(ids)} ({', '.join(ids[:10])}{', ...' if len(ids) > 10 else ''})")
    return "\n".join(lines) + "\n"


def _shared_markdown(report: dict[str, Any], tasks: list[str], cells: dict[tuple[str, str], dict[str, Any]],
                     macro: dict[str, dict[str, Any]]) -> list[str]:
    """The report's shared-candidates sections: the shared pool's cost, each method's shared and added
    compute (matched-compute comparison: the added calls column), the single model's choice, and each
    model's self-consistency over its own share of the pool."""
    shared = (report.get("settings") or {}).get("shared")
    lines = ["", "## Shared and added compute", ""]
    if not shared:
        lines.append("No shared candidate pool: every protocol drew its own samples (first edition; "
                     "`--shared-candidates` draws one pool per question for all of them). Everything below is added.")
    else:
        lines.append(f"One candidate pool per question: k = {shared['k']} samples from each of "
                     + ", ".join(f"`{m}`" for m in shared["models"])
                     + f" (temperature {shared['temperature']}, max {shared['max_tokens']} tokens, {shared['shots']} "
                       "shots, the neutral solver prompt), drawn once and given to every protocol that starts from "
                       "independent samples.")
        for p in report.get("shared_pool") or []:
            lines.append(f"- {p['task']}: the pool cost {fmt_num(p['calls_per_q'])} calls, {fmt_num(p['samples_per_q'])} "
                         f"samples, {fmt_tokens(p['tokens_per_q'])} generated tokens per question (`{p['run_id']}`).")
        for t, c in (shared.get("single_model") or {}).items():
            lines.append(f"- {t}: single model `{c['model']}`: {c['source']}.")
    lines += ["", "Per question: shared = taken from the pool (drawn once for all methods); added = the method's own "
              "calls beyond it. Compare methods at matched compute on the added calls.", "",
              "| method | task | shared calls | shared samples | shared tokens | added calls | added samples | "
              "added tokens |", "|---|---|---|---|---|---|---|---|"]
    for m in report["methods"]:
        for t in tasks + ["macro"]:
            c = macro.get(m) if t == "macro" else cells.get((t, m))
            if c is not None and "added_calls_per_q" in c:
                lines.append(f"| {m} | {t} | {fmt_num(c['shared_calls_per_q'])} | {fmt_num(c['shared_samples_per_q'])} | "
                             f"{fmt_tokens(c['shared_tokens_per_q'])} | **{fmt_num(c['added_calls_per_q'])}** | "
                             f"{fmt_num(c['added_samples_per_q'])} | {fmt_tokens(c['added_tokens_per_q'])} |")
    sc = report.get("model_self_consistency") or []
    if sc:
        lines += ["", "## Per-model self-consistency (free)", "",
                  "Each model's plurality over its own share of the pool (no call of its own), beside its expected "
                  "one-sample accuracy.", "", "| model | task | samples | self-consistency | one sample |",
                  "|---|---|---|---|---|"]
        one = {(x["task"], x["model"]): x for x in report.get("single_models") or []}
        for x in sc:
            o = one.get((x["task"], x["model"]))
            lines.append(f"| `{x['model']}` | {x['task']} | {fmt_num(x['samples_per_q'], 0)} | {fmt_accuracy(x)} | "
                         + ("-" if o is None else fmt_accuracy(o)) + " |")
    return lines


# ---------------------------------------------------------------------------- the PNG


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates, for a cost ``x`` (lower is better) and an
    accuracy ``y`` (higher is better), ordered by cost. A point is dominated when another costs no
    more and is no less accurate, and is better in one of the two; NaN points are left out.

    >>> pareto_front([(1, 0.5), (2, 0.4), (3, 0.7), (3, 0.6)])
    [0, 2]
    """
    ok = [i for i, (x, y) in enumerate(points) if x == x and y == y]
    front = [i for i in ok if not any(
        points[j][0] <= points[i][0] and points[j][1] >= points[i][1]
        and (points[j][0] < points[i][0] or points[j][1] > points[i][1]) for j in ok)]
    seen: set[tuple[float, float]] = set()
    out = []
    for i in sorted(front, key=lambda i: (points[i][0], -points[i][1], i)):
        if tuple(points[i]) not in seen:  # two methods at the same point: one front vertex
            seen.add(tuple(points[i]))
            out.append(i)
    return out


def plot_accuracy_vs_tokens(report: dict[str, Any], path: str | Path) -> Path:
    """One PNG: accuracy against generated tokens per question, a point per method and task
    (marker per method, colour per task) with its 95 % CI as a vertical bar, and each task's Pareto
    front (dashed). Methods at the same point (ALIGN's baselines often coincide) are spread
    sideways by a few points and labelled, so none hides another; a hollow marker is a cell on too
    few questions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.lines import Line2D

    cells = [c for c in report["cells"] if c["accuracy"] == c["accuracy"] and c["tokens_per_q"] == c["tokens_per_q"]]
    tasks = [t["name"] for t in report["tasks"]]
    markers = dict(zip(report["methods"], itertools.cycle("os^vDP*XhpH<>d8")))  # more methods than shapes: reuse
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 5))
    groups: dict[tuple[float, float], list[int]] = {}
    for i, c in enumerate(cells):
        groups.setdefault((round(c["tokens_per_q"], 6), round(c["accuracy"], 6)), []).append(i)
    from matplotlib.transforms import offset_copy

    for members in groups.values():
        for rank, i in enumerate(members):
            c = cells[i]
            shift = 7.0 * (rank - (len(members) - 1) / 2)  # points, sideways: coincident methods stay visible
            where = offset_copy(ax.transData, fig=fig, x=shift, y=0.0, units="points")
            colour = colours(tasks.index(c["task"]) % 10)
            x, y = c["tokens_per_q"], 100 * c["accuracy"]
            ax.update_datalim([(x, y)])  # shifted artists do not widen the axes themselves
            if c["ci_low"] == c["ci_low"]:
                ax.errorbar([x], [y], yerr=[[y - 100 * c["ci_low"]], [100 * c["ci_high"] - y]], fmt="none",
                            ecolor=colour, elinewidth=0.9, alpha=0.6, capsize=2, transform=where, zorder=2)
            ax.scatter([x], [y], marker=markers.get(c["method"], "o"), s=55, alpha=0.9, zorder=3, transform=where,
                       facecolors="none" if c.get("too_few") else colour, edgecolors=colour)
            if len(members) > 1:
                down = y > 50  # the label runs away from the nearer edge, one upright label per marker
                ax.annotate(c["method"], (x, y), xytext=(shift, -7 if down else 7), textcoords="offset points",
                            fontsize=6, color=colour, ha="center", va="top" if down else "bottom", rotation=90)
    ax.autoscale_view()
    if cells:
        left, right = ax.get_xlim()
        ax.set_xlim(left - 0.04 * (right - left or 1), right + 0.04 * (right - left or 1))  # room for the spread
    points = [(c["tokens_per_q"], c["accuracy"]) for c in cells]
    for t in tasks:
        mine = [i for i, c in enumerate(cells) if c["task"] == t]
        front = [mine[i] for i in pareto_front([points[i] for i in mine])]
        if front:
            ax.plot([points[i][0] for i in front], [100 * points[i][1] for i in front], "--",
                    color=colours(tasks.index(t) % 10), lw=1, zorder=2)
    handles = [Line2D([], [], ls="", marker=markers[m], color="0.35", label=m) for m in report["methods"]
               if any(c["method"] == m for c in cells)]
    handles += [Line2D([], [], ls="--", color=colours(i % 10), label=f"{t} (Pareto front dashed)")
                for i, t in enumerate(tasks)]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", color="0.35",
                          label=f"hollow: {TOO_FEW} (< {MIN_QUESTIONS})"))
    ax.set_xlabel("generated tokens per question")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-5, 105)
    ax.set_title(f"bench {report['bench_id']}: accuracy vs generated tokens per question")
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- the files


@dataclass(frozen=True, slots=True)
class ReportFiles:
    """The report's three files."""

    markdown: Path
    json: Path
    png: Path


def write_report(store: TraceStore, spec: BenchSpec, out: str | Path, *, seed: int = 0,
                 record: bool = True) -> tuple[dict[str, Any], ReportFiles]:
    """Build the report (:func:`build_report`) and write ``bench.md``, ``bench.json`` and
    ``accuracy_vs_tokens.png`` to ``out`` (created); with ``record``, also its rows in the trace DB
    (:func:`agora.traces.bench_spec.record_bench`). Returns the report and the files' paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(store, spec, seed=seed)
    files = ReportFiles(out / "bench.md", out / "bench.json", out / "accuracy_vs_tokens.png")
    files.markdown.write_text(report_markdown(report), encoding="utf-8")
    files.json.write_text(report_json(report), encoding="utf-8")
    plot_accuracy_vs_tokens(report, files.png)
    if record:
        record_bench(store, spec, report)
    return report, files
