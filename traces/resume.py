"""The resume rules' comparisons: a run id's check, question content hashes, and what differs
between a run's stored settings, pool and data and a rerun's (:meth:`TraceStore.start_run`), and
why a rerun would be refused, asked before anything runs (:func:`resume_refusal`)."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.tasks.problem import SAME_ID, id_key
from agora.traces.errors import ResumeRefusedError
from agora.traces.pg_sql import is_postgres_url
from agora.traces.rows import _json, option_count


#: ``pool`` fields that say how a model is reached, not which model answers: a resumed run may
#: change them (a server restarted on another port), unlike any other field of the pool.
TRANSPORT_FIELDS = ("base_url", "endpoints", "timeout_s", "max_retries", "api_key")
#: The same for a member's ``options`` and a ``langchain`` member's ``options.kwargs`` (the LangChain
#: class's own names for its endpoint, credentials, client and timeouts: ``ChatOpenAI``,
#: ``ChatOllama``, ``ChatAnthropic``...): the same model served elsewhere gives the same samples.
TRANSPORT_KWARGS = frozenset(TRANSPORT_FIELDS) | {
    "openai_api_base", "api_base", "endpoint", "endpoint_url", "azure_endpoint", "anthropic_api_url",
    "openai_api_key", "anthropic_api_key", "google_api_key", "timeout", "request_timeout",
    "default_request_timeout", "http_client", "http_async_client", "default_headers", "default_query",
    "client_kwargs", "async_client_kwargs", "sync_client_kwargs", "openai_proxy", "proxy", "keep_alive",
    "organization", "openai_organization"}



#: What each refused Unicode category of a run id's character is, in a refusal: C0/C1 control
#: characters (a bell, a newline, an escape), invisible format characters (bidirectional overrides
#: and isolates such as U+202E, zero-width spaces and joiners, U+FEFF, a soft hyphen), lone
#: surrogates (half of a UTF-16 pair: not a character, unwritable as UTF-8), line and paragraph
#: separators. They hide in terminals, logs and file names, or make an id read as another one.
_RUN_ID_BAD_CATEGORIES = {
    "Cc": "the control character", "Cf": "the invisible format character",
    "Cs": "the lone surrogate",
    "Zl": "the line separator", "Zp": "the paragraph separator"}


#: The characters :func:`check_run_id` refuses that are ASCII or Latin-1 controls, separators and
#: surrogates, as a pattern (kept for callers of the old name; the check reads the categories).
_RUN_ID_BAD = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _bad_character(run_id: str) -> tuple[int, str, str] | None:
    """The first character of ``run_id`` a run id may not hold: (position, the character, what it is)."""
    if run_id.isascii() and run_id.isprintable():
        return None
    for i, ch in enumerate(run_id):
        what = _RUN_ID_BAD_CATEGORIES.get(unicodedata.category(ch))
        if what:
            return i, ch, what
    return None


#: The most characters a run id given by the user may have (``--run-id``, ``--thread``): ids are
#: printed in tables and commands, and are part of the ids Agora derives from them.
MAX_RUN_ID_CHARS = 200
#: The most characters of a run id Agora stores or reads (:meth:`TraceStore.start_run`, a bundle's runs,
#: a report's ``--run-id``): room for the ids derived from a user's (``<bench>:<task>:<protocol>``,
#: ``<run>-duels``, ``<base>:<a>><b>``) on top of :data:`MAX_RUN_ID_CHARS`.
MAX_STORED_RUN_ID_CHARS = 1000


def check_run_id(run_id: Any, option: str = "--run-id", *, max_chars: int = MAX_RUN_ID_CHARS) -> str:
    """``run_id`` if it is a usable run id, else a one-line refusal naming ``option``: the one check
    every command that takes a run id (``--run-id``, ``--thread``, ``--dev-run-id``, a bundle's
    runs) and :meth:`TraceStore.start_run` apply, before anything is created.

    Refused: a non-string, an empty or blank id, one longer than ``max_chars`` characters
    (:data:`MAX_RUN_ID_CHARS` for an id the user names for a new run; :data:`MAX_STORED_RUN_ID_CHARS`
    where derived ids are stored or read), leading or trailing white space, a leading ``-``
    (printed commands such as ``--run-id -x`` would read it as an option), control
    characters, invisible format characters (bidirectional overrides such as U+202E, zero-width
    spaces and joiners), lone surrogates and line or paragraph separators
    (:data:`_RUN_ID_BAD_CATEGORIES`, each named for what it is and shown escaped in the message).

    Raises:
        ValueError: naming ``option`` and the id as Python writes it (``'a\\x07b'``).
    """
    if not isinstance(run_id, str):
        raise InputError(f"{option}: a run id is text, got {run_id!r}")
    if not run_id.strip():
        raise InputError(f"{option} {run_id!r}: a blank run id; give a name (letters, digits, - _ : . …)")
    if len(run_id) > max_chars:
        raise InputError(f"{option} {run_id[:40]!r}… ({len(run_id)} characters): a run id has at most {max_chars} "
                         "characters; give a shorter one")
    bad = _bad_character(run_id)
    if bad:
        at, ch, what = bad
        name = unicodedata.name(ch, "")  # (control characters and surrogates have none)
        shown = repr(ch) + (f" ({name})" if name else "")
        half = " (half of a UTF-16 pair, not a character)" if unicodedata.category(ch) == "Cs" else ""
        raise InputError(f"{option} {run_id!r}: holds {what} {shown} at position {at}{half}; run ids are printed "
                         "and written to files, so use visible characters")
    if run_id != run_id.strip():
        raise InputError(f"{option} {run_id!r}: leading or trailing white space in a run id; remove it")
    if run_id.startswith("-"):
        raise InputError(f"{option} {run_id!r}: a run id may not start with '-' (the commands Agora prints "
                         f"would read it as an option); start it with a letter or digit")
    return run_id



#: Letters of other scripts that print as a Latin letter in common fonts (from Unicode's
#: confusables list: Cyrillic and Greek), mapped to it by :func:`run_id_skeleton`.
_LOOK_ALIKES = str.maketrans({
    **dict(zip("аеорсухѕіјԁһԛԝӏɑ", "aeopcyxsijdhqwla")),
    **dict(zip("АВЕКМНОРСТХУЅІЈԚԜ", "ABEKMHOPCTXYSIJQW")),
    **dict(zip("ονρικυΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ovpikuABEZHIKMNOPTYX")),
})


def run_id_skeleton(run_id: str) -> str:
    """What run ids are compared by when a new run is started (:func:`lookalike_refusal`): the id
    in Unicode NFKC form (full-width ``ｒ１`` is ``r1``), its Cyrillic and Greek letters that print
    as Latin ones taken as those (``rаn`` with a Cyrillic ``а`` is ``ran``), without trailing dots
    (``ran.`` is ``ran``). Two ids with one skeleton print, or are typed, alike."""
    return unicodedata.normalize("NFKC", run_id).translate(_LOOK_ALIKES).rstrip(".")


def _first_difference(run_id: str, other: str) -> str:
    """How ``run_id`` differs from ``other`` where it first does: ``'а' (CYRILLIC SMALL LETTER A)
    at position 1`` or ``a trailing '.'``."""
    for i, (a, b) in enumerate(zip(run_id, other)):
        if a != b:
            return f"{a!r} ({unicodedata.name(a, 'U+%04X' % ord(a))}) at position {i} where it has {b!r}"
    longer, shorter = (run_id, other) if len(run_id) > len(other) else (other, run_id)
    whose = "yours ends in" if longer is run_id else "it ends in"
    return f"{whose} {longer[len(shorter):]!r}"


def lookalike_note(run_id: str, existing: Any, *, name_it: bool = False) -> str:
    """For a refusal of a run id the database does not hold: ``; the run 'ran' looks like it ('а'
    (CYRILLIC SMALL LETTER A) at position 1 where it has 'a')`` when one of ``existing`` (run ids)
    has the same :func:`run_id_skeleton` (the user typed a look-alike of it), else ``""``.
    ``name_it``: say which id the note is about (``; for 'rаn': the run ...``), for a refusal of several."""
    skeleton = run_id_skeleton(run_id)
    other = next((o for o in existing if o != run_id and run_id_skeleton(o) == skeleton), None)
    if other is None:
        return ""
    return f"; {f'for {run_id!r}: ' if name_it else ''}the run {other!r} looks like it ({_first_difference(run_id, other)})"


def lookalike_refusal(run_id: str, existing: Any, option: str = "run id") -> str | None:
    """Why a NEW run may not take the id ``run_id`` (``existing``: the ids of the runs the database
    holds, ``run_id`` not among them), or ``None``: an id that is not in Unicode NFKC form
    (full-width or other compatibility characters, which are typed as their plain forms), or one
    that looks like an existing run's id (:func:`run_id_skeleton`: the same once look-alike letters,
    full-width forms and trailing dots are set aside). A user who types a look-alike of a run's id
    means to resume that run: starting a second run silently would redo every question. Runs
    already stored under such ids resume as before; only new ones are refused."""
    plain = unicodedata.normalize("NFKC", run_id)
    if plain != run_id:
        at = next(i for i, ch in enumerate(run_id) if unicodedata.normalize("NFKC", ch) != ch)
        ch = run_id[at]
        return (f"{option} {run_id!r}: {ch!r} ({unicodedata.name(ch, 'U+%04X' % ord(ch))}) at position {at} is "
                f"a compatibility form of {unicodedata.normalize('NFKC', ch)!r}; a new run's id must be in "
                f"Unicode NFKC form: use {plain!r} (nothing was run or recorded)")
    skeleton = run_id_skeleton(run_id)
    other = next((o for o in existing if o != run_id and run_id_skeleton(o) == skeleton), None)
    if other is None:
        return None
    return (f"{option} {run_id!r}: looks like the existing run {other!r} ({_first_difference(run_id, other)}); "
            f"to resume that run give its id exactly ({other!r}), or choose an id that does not look like it "
            "(nothing was run or recorded)")


#: The key of ``runs.dataset`` holding each question's content hash (:func:`question_hash`), which a
#: resume compares (:meth:`TraceStore.start_run`).
QUESTION_HASHES = "question_sha256"


def question_hash(question: str, gold: str | None, kind: str | None = None, n_choices: int | None = None) -> str:
    """A short content hash of one question as a run asks and scores it: its text (options
    included, as the loaders render them), gold answer, kind and option count (16 hex digits of
    SHA-256; lone surrogates hashed as they are)."""
    text = json.dumps([question, gold, kind, n_choices or 0], ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def _changed_questions(before: Any, now_hashes: Any) -> list[str]:
    """Ids whose hash differs between the run's stored hashes and this call's (ids in only one of
    them are not compared: a larger or smaller ``--limit``); ``[]`` when either has none (a run
    started before hashes were stored)."""
    if not isinstance(before, dict) or not isinstance(now_hashes, dict):
        return []
    return [qid for qid, h in now_hashes.items() if qid in before and before[qid] != h]


def _shown(value: Any, width: int = 40) -> str:
    """``value`` as JSON in at most about ``width`` characters; a long string keeps its quotes and
    both ends (a path's file name is at its end), a long other value its start."""
    if isinstance(value, str) and len(value) > width - 2:
        keep = width - 3
        value = value[:keep // 3] + "…" + value[-(keep - keep // 3):]
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width + 10 else text[:width - 1] + "…"


def _differences(here: Any, there: Any, prefix: str = "") -> list[str]:
    """``"field: X here, Y in the run"`` for each leaf of two JSON values (settings) that differs,
    with dotted names for nested fields."""
    if isinstance(here, dict) and isinstance(there, dict):
        out: list[str] = []
        for key in dict.fromkeys([*here, *there]):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in there:
                out.append(f"{name}: {_shown(here[key])} here, unset in the run")
            elif key not in here:
                out.append(f"{name}: unset here, {_shown(there[key])} in the run")
            else:
                out += _differences(here[key], there[key], name)
        return out
    if isinstance(here, list) and isinstance(there, list) and len(here) == len(there):
        out = []
        for i, (a, b) in enumerate(zip(here, there)):
            out += _differences(a, b, f"{prefix}[{i}]")
        return out
    return [] if here == there else [f"{prefix or 'value'}: {_shown(here)} here, {_shown(there)} in the run"]


def _pool_differences(here: Any, there: Any) -> list[str]:
    """What differs between two pools (lists of model descriptions): members, then fields by member name."""
    def by_name(pool: Any) -> dict[str, Any]:
        if not isinstance(pool, list):
            return {}
        return {str(m.get("name", i)) if isinstance(m, dict) else str(i): m for i, m in enumerate(pool)}

    a, b = by_name(here), by_name(there)
    if list(a) != list(b):
        return [f"members {', '.join(a) or 'none'} here, {', '.join(b) or 'none'} in the run"]
    out = []
    for name in a:
        out += [f"{name}.{d}" for d in _differences(a[name], b[name])]
    return out or ["the pools differ"]


def _models(pool: Any) -> Any:
    """A pool description without :data:`TRANSPORT_FIELDS` (what a resume compares), nor
    :data:`TRANSPORT_KWARGS` in a member's ``options`` and ``options.kwargs`` (a ``langchain``
    member's ``base_url``, like an ``openai`` member's)."""
    def member(m: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in m.items() if k not in TRANSPORT_FIELDS}
        options = out.get("options")
        if isinstance(options, dict):
            options = {k: v for k, v in options.items() if k not in TRANSPORT_KWARGS}
            if isinstance(options.get("kwargs"), dict):
                options["kwargs"] = {k: v for k, v in options["kwargs"].items() if k not in TRANSPORT_KWARGS}
            out["options"] = options
        return out

    if isinstance(pool, list):
        return [member(m) if isinstance(m, dict) else m for m in pool]
    return pool


def data_changes(store: Any, run_id: str, before: Any, now_ds: Any) -> tuple[list[str], list[str]]:
    """What differs between the dataset run ``run_id`` was started on (``before``, its ``runs.dataset``)
    and the one a resume gives (``now_ds``): ``(["path", "format"] or a part, ["data path: X here, Y
    in the run", ...])``, the fields :meth:`agora.traces.store.TraceStore.start_run` refuses; ``([], [])``
    for the same data.

    A data file at another path (a bench or run moved to another machine, ``agora export`` /
    ``agora import``) is the same data when it holds the same questions: the questions both
    calls select (same ids) have the same content hash (:func:`question_hash`: text with options,
    gold, kind). A run recorded before per-question hashes (no :data:`QUESTION_HASHES` key) is
    compared on its recorded questions (the ``questions`` rows: text, gold, kind). The run's
    stored dataset keeps the path it was started on (its provenance; a bench's spec names the
    files of its latest call); the path stays a difference when no question can be compared
    (no hashes given now, or no question in common).

    Raises:
        ResumeRefusedError: questions of the run differ now: edited in the same file (naming
            them), or in the file at another path (naming the run id, both paths and how many
            of the questions compared differ); a question id of the data that is one of the run's
            ids spelled otherwise (:func:`id_clash_refusal`).
    """
    if not isinstance(before, dict) or not isinstance(now_ds, dict):
        return [], []
    if isinstance(now_ds.get(QUESTION_HASHES), dict):
        refused = id_clash_refusal(store, run_id, now_ds[QUESTION_HASHES], set(before.get(QUESTION_HASHES) or ()))
        if refused:
            raise ResumeRefusedError(refused)
    changed = [k for k in ("path", "format") if before.get(k) != now_ds.get(k)]
    hint = ""
    if changed == ["path"]:  # the same format at another path: the same data if it holds the same questions
        compared, differ = _compared_questions(store, run_id, before, now_ds)
        old_name, new_name = (Path(str(d.get("path") or "")).name for d in (before, now_ds))
        if (not compared and old_name != new_name and before.get(QUESTION_HASHES)
                and now_ds.get(QUESTION_HASHES)):
            hint = (f" (none of its question ids is one of the run's; questions without an `id` field are "
                    f"numbered from the file's name: if it holds the same questions, name it {old_name!r} as before)")
        if differ:
            raise ResumeRefusedError(
                f"run id {run_id!r} in {store.path} was started on {_shown(before.get('path'), 500)} and is "
                f"resumed on {_shown(now_ds.get('path'), 500)}: {len(differ)} of the {compared} questions "
                f"compared differ (text, gold or options; e.g. {', '.join(repr(q) for q in differ[:3])}); "
                "resume on a file holding the same questions, or pick a new --run-id")
        if compared:
            changed = []
    if changed:
        return changed, [f"data {k}: {_shown(now_ds.get(k))} here, {_shown(before.get(k))} in the run"
                         + (hint if k == "path" else "") for k in changed]
    edited = _changed_questions(before.get(QUESTION_HASHES), now_ds.get(QUESTION_HASHES))
    if edited:
        shown = ", ".join(repr(q) for q in edited[:5]) + (f" and {len(edited) - 5} more" if len(edited) > 5 else "")
        raise ResumeRefusedError(
            f"run id {run_id!r} in {store.path}: the data changed since the run started: question(s) "
            f"{shown} differ from the ones the run was started on (text, gold or options); rerun "
            "with the original file to resume it, or pick a new --run-id")
    return [], []

def id_clash_refusal(store: Any, run_id: str, ids: Any, known: set[str] = frozenset()) -> str | None:
    """Why questions ``ids`` cannot be added to run ``run_id`` of ``store``: one of them is an id the
    run holds (``known``, or a ``questions`` or ``model_calls`` row) spelled otherwise, the same id
    once compared as ids are (:func:`agora.tasks.problem.id_key`: ``q1 `` or ``ｑ１`` for ``q1``), so
    reports and resumes could not tell the two apart; ``None`` when none is. One line naming both."""
    taken = set(known) | store.question_ids(run_id)
    keys = {id_key(q): q for q in taken}
    for qid in ids:
        other = keys.get(id_key(qid)) if qid not in taken else None
        if other is not None:
            return (f"run id {run_id!r} in {store.path}: question id {qid!r} and the run's question id {other!r} are "
                    f"{SAME_ID}; give the question the run's id, or pick a new --run-id")
    return None


def _compared_questions(store: Any, run_id: str, before: dict[str, Any], now_ds: dict[str, Any]) -> tuple[int, list[str]]:
    """``(questions compared, ids of those that differ)`` between a run's questions and the
    hashes ``now_ds`` gives (:data:`QUESTION_HASHES`; ``(0, [])`` without them): the run's
    stored hashes, else its recorded ``questions`` rows (an ``mc`` row's option count is read
    from its text when the row has none, as the loaders render options)."""
    now_hashes = now_ds.get(QUESTION_HASHES)
    if not isinstance(now_hashes, dict):
        return 0, []
    old = before.get(QUESTION_HASHES)
    if isinstance(old, dict):
        common = [q for q in now_hashes if q in old]
        return len(common), [q for q in common if old[q] != now_hashes[q]]
    differ, compared = [], 0
    for r in store.db.query("select question_id, question, gold, kind, n_choices from questions where run_id = ? "
                           "order by idx, question_id", [run_id]):
        if r["question_id"] not in now_hashes:
            continue
        compared += 1
        counts = {r["n_choices"], option_count(r["question"], r["kind"])}
        if now_hashes[r["question_id"]] not in {question_hash(r["question"], r["gold"], r["kind"], n) for n in counts}:
            differ.append(r["question_id"])
    return compared, differ


def recorded_settings(config: Any) -> Any:
    """``config`` as a run's ``runs`` row records it (its JSON value): every Postgres URL in it (a dev
    run's database, ``dev_db``) with its password shown as ``***`` (:func:`~agora.traces.pg_sql.shown_url`),
    since a run's settings are printed (``agora report run --json``) and travel with it (``agora
    export``). A rerun's settings are compared with the recorded ones in this form."""
    def left_out(value: Any) -> Any:
        if isinstance(value, str):
            return shown_url(value) if is_postgres_url(value) else value
        if isinstance(value, dict):
            return {k: left_out(v) for k, v in value.items()}
        if isinstance(value, list):
            return [left_out(v) for v in value]
        return value

    return left_out(json.loads(_json(config)))


def refusal(store: Any, run_id: str, existing: dict[str, Any], protocol: str, config: Any, pool: Any,
            before: Any = None, now_ds: Any = None, *, pool_may_change: bool = False, suffix: str = "",
            advice: str | None = None) -> str | None:
    """Why resuming run ``run_id`` (its ``runs`` row ``existing``) with this protocol, settings, pool
    and dataset would mix two experiments in one run, or ``None``: another protocol; another dataset
    (``before``, the run's, against ``now_ds``; ``now_ds=None``: not compared; :func:`data_changes`),
    other settings or another pool (unless ``pool_may_change``; :data:`TRANSPORT_FIELDS` may change).
    The one message of :meth:`agora.traces.store.TraceStore.start_run` and :func:`resume_refusal`:
    its first line names what changed and how, ``suffix`` ends that line, and a second line names
    the pool's differences. ``advice``: what to do instead of the command line's (``rerun with the
    same options to resume it, or pick a new --run-id``), for callers without options (an app's
    :class:`~agora.graphs.recording.TraceRecorder`).

    Raises:
        ResumeRefusedError: questions edited in place (:func:`data_changes`).
    """
    if existing["protocol"] != protocol:
        return (f"run id {run_id!r} already holds a {existing['protocol']} run in {store.path}; "
                f"{advice or 'pick a new --run-id'}{suffix}")
    changed, details = store.data_changes(run_id, before, now_ds) if now_ds is not None else ([], [])
    given = _json(recorded_settings(config))
    # (a run recorded before passwords were left out of its settings compares as it is recorded now)
    if existing["config"] != given and _json(recorded_settings(store._run_json(existing, "config"))) != given:
        changed.append("settings")
        details += _differences(json.loads(given), recorded_settings(store._run_json(existing, "config")))
    pool_note = ""
    if not pool_may_change:
        old_pool, new_pool = _models(store._run_json(existing, "pool")), _models(json.loads(_json(pool)))
        if old_pool != new_pool:
            changed.append("pool")
            pool_note = "\n  pool: " + "; ".join(_pool_differences(new_pool, old_pool)[:4])
    if not changed:
        return None
    said = f" ({'; '.join(details[:4])})" if details else ""
    advice = advice or "rerun with the same options to resume it, or pick a new --run-id"
    return f"run id {run_id!r} in {store.path} was started with other {', '.join(changed)}{said}; {advice}{suffix}{pool_note}"


def resume_refusal(store: Any, run_id: str, protocol: str, config: Any, pool: Any,
                   dataset: Any = None, *, advice: str | None = None) -> str | None:
    """Why :meth:`agora.traces.store.TraceStore.start_run` would refuse to resume ``run_id`` with
    this protocol, settings, pool and ``dataset`` (as :func:`agora.graphs.runner.run_dataset` makes
    it; ``None``: not checked): its message (:func:`refusal`), saying that nothing was run or
    recorded, or ``None`` (a new run, or the same); a new run whose id is refused by
    :func:`lookalike_refusal` gets that refusal. A bench asks it for every run before its spec is
    recorded, so a refused rerun changes nothing in the DB. Task files at another path holding the
    same questions (a bench moved to another machine) resume (:func:`data_changes`); the runs keep
    the paths they started on, the bench's spec names the files of this call. ``advice``: as
    :func:`refusal`'s."""
    existing = store.get_run(run_id)
    if existing is None:
        return lookalike_refusal(run_id, store.run_ids())
    suffix = " (nothing was run or recorded)"
    try:
        return refusal(store, run_id, existing, protocol, config, pool, store._run_json(existing, "dataset") or {},
                       None if dataset is None else json.loads(_json(dataset)) or {}, suffix=suffix,
                       advice=advice)
    except ResumeRefusedError as exc:
        return f"{exc}{suffix}"
