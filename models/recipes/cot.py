"""Chain-of-thought (``recipe = "cot"``): the protocol's own prompt, unchanged; the default when an
entry names no recipe (Wei et al. 2022, arXiv 2201.11903)."""

from agora.models.recipes.registry import Recipe


class ChainOfThought(Recipe):
    """The protocol's prompt as it is: reason in words, end with ``The answer is ...``."""

    name = "cot"
    summary = "chain-of-thought: the protocol's own prompt (the default)"


RECIPE = ChainOfThought
