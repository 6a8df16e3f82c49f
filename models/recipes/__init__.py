"""Member recipes: how a pool member is asked and how its reply becomes its answer.

A member is weights × recipe (``recipe = "pot"`` in a pool entry, docs/models.md). Built-ins:
``cot`` (chain-of-thought, the default), ``pot`` (program-of-thought, run in
:mod:`agora.models.recipes.sandbox`), ``persona`` and ``fewshot``. Each is one module of this
package; the registry is :mod:`agora.models.recipes.registry`.
"""

from agora.models.recipes.registry import (ANSWER_ROLES, Finished, Recipe, RecipeError, get_recipe, recipe_from_entry,
                                           recipe_names, register_recipe, unregister_recipe)

__all__ = ["ANSWER_ROLES", "Finished", "Recipe", "RecipeError", "get_recipe", "recipe_from_entry", "recipe_names",
           "register_recipe", "unregister_recipe"]
