"""Settings are checked one way (agora.models.validation: pydantic dataclasses with field rules and
model validators): a bad value is one exception naming the class, the field and the value, the
dataclass behaviour callers rely on is kept, and no product class checks its values in a
``__post_init__`` of its own."""

import ast
import dataclasses
import pickle
from pathlib import Path
from typing import Annotated

import pytest

from agora.agents.delegation import DelegationConfig
from agora.agents.judge import JudgeConfig
from agora.models.backend import Backend, BackendConfig
from agora.models.contract import SamplingParams
from agora.models.errors import PoolConfigError
from agora.models.member import ModelSpec
from agora.models.validation import (Check, Choice, Count, Flag, Instance, Name, Names, Number, Rule, is_settings,
                                     settings)

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("agents", "models", "graphs", "traces", "runs", "training", "tasks", "cli")


@settings
class Knobs:
    """A settings class of this test, one field per rule."""

    k: Annotated[int, Count(1)] = 3
    shots: Annotated[int, Count(0, 2)] = 2
    rate: Annotated[float, Number(0.0, 1.0, low_open=True)] = 0.5
    budget: Annotated[float | None, Number(0.0, optional=True)] = None
    mode: Annotated[str, Choice("fast", "slow")] = "fast"
    layout: Annotated[str, Choice("a", "b", "c")] = "a"
    names: Annotated[tuple[str, ...], Names] = ()
    chair: Annotated[str | None, Name()] = None
    loud: Annotated[bool, Flag] = False
    inner: Annotated[JudgeConfig, Instance(JudgeConfig)] = dataclasses.field(default_factory=JudgeConfig)
    rounds: Annotated[int, Count(1), Check(lambda v: v <= 8, "at most 8 (each round costs a call)")] = 2
    port: Annotated[int, Rule(lambda v: 1 <= v <= 65535, "port must be in 1..65535, got {value}")] = 80
    note: str = "kept as given"


@pytest.mark.parametrize("field, value, expected", [
    ("k", True, "an integer >= 1"),
    ("k", 2.0, "an integer >= 1"),
    ("shots", 3, "an integer in 0..2"),
    ("rate", 0.0, "a finite number in (0, 1]"),
    ("rate", float("nan"), "a finite number in (0, 1]"),
    ("budget", -1, "a finite number >= 0 or None"),
    ("mode", "medium", "'fast' or 'slow'"),
    ("layout", "d", "one of 'a', 'b', 'c'"),
    ("names", "ab", "a tuple of non-empty names"),
    ("chair", "", "a non-empty string or None"),
    ("loud", 1, "True or False"),
    ("inner", {"shots": 0}, "a JudgeConfig"),
    ("rounds", 0, "an integer >= 1"),
    ("rounds", 9, "at most 8 (each round costs a call)"),
])
def test_a_refused_value_is_one_value_error_naming_class_field_and_value(field, value, expected):
    with pytest.raises(ValueError) as err:
        Knobs(**{field: value})
    assert type(err.value) is ValueError  # not pydantic's ValidationError
    assert str(err.value) == f"Knobs.{field} must be {expected}, got {value!r}"


def test_a_rule_with_its_own_message_and_a_cross_field_rule_keep_their_words_and_type():
    with pytest.raises(ValueError) as err:
        Knobs(port=0)
    assert str(err.value) == "port must be in 1..65535, got 0"
    with pytest.raises(ValueError) as err:
        JudgeConfig(s_min=5.0, s_max=5.0, fallback=5.0)
    assert str(err.value) == "JudgeConfig.s_min must be < s_max, got 5.0 and 5.0"
    with pytest.raises(ValueError) as err:
        JudgeConfig(fallback=11.0)
    assert str(err.value) == "JudgeConfig.fallback must be a finite number in [1, 10], got 11.0"
    with pytest.raises(PoolConfigError) as err:
        ModelSpec("m", "openai", timeout_s=0)
    assert str(err.value) == "model 'm': field 'timeout_s': must be a finite number in (0.0, 86400.0], got 0"
    with pytest.raises(TypeError, match=r"^backend 'x': config must be a subclass"):
        Backend("x", dict, lambda spec: None)
    with pytest.raises(ValueError) as err:
        Backend("not a name", BackendConfig, lambda spec: None)
    assert str(err.value) == "backend name must be an identifier, got 'not a name'"
    with pytest.raises(ValueError) as err:
        DelegationConfig(k_samples=True)
    assert str(err.value) == "DelegationConfig.k_samples must be an integer >= 1, got True"


def test_settings_stay_frozen_dataclasses_and_values_are_kept_as_given():
    config = DelegationConfig(temperature=1, models=("a", "b"), dev_accuracy={"a": 0.5})
    assert is_settings(DelegationConfig) and dataclasses.is_dataclass(config)
    assert config.temperature == 1 and type(config.temperature) is int  # no coercion to float
    assert config.dev_accuracy == (("a", 0.5),)  # a converter's result is what the field holds
    assert dataclasses.replace(config, tau=1.0).tau == 1.0
    assert dataclasses.asdict(config)["models"] == ("a", "b")
    assert "k_samples" in {f.name for f in dataclasses.fields(DelegationConfig)}
    assert hash(config) == hash(DelegationConfig(temperature=1, models=("a", "b"), dev_accuracy={"a": 0.5}))
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tau = 0.1
    with pytest.raises(ValueError, match=r"^DelegationConfig.k_samples must be an integer >= 1, got 0$"):
        dataclasses.replace(config, k_samples=0)  # replace checks again
    assert SamplingParams(stop=["x"]).stop == ["x"]  # a field with no rule: as given, as on a plain dataclass
    assert Knobs(note=3).note == 3


#: The product classes that still have a ``__post_init__``, and why. Neither is a settings or context
#: class: each derives a field it computes (``init=False``) from what it is given, and refuses only
#: what that derivation cannot use.
POST_INIT_ALLOWED = {
    "LexiconDetector": ("a cue detector built in code (HEDGING, REPAIR, CHALLENGE), not settings: derives its "
                        "phrase index (init=False) from its phrases, refusing an empty lexicon or a phrase "
                        "with no word tokens, which leave nothing to index"),
    "PoolMember": ("the pool's runtime pairing of a spec and a built model, not settings: derives its sampler "
                   "(the model as the member contract) from the model, refusing an object that is neither "
                   "a BaseChatModel nor a member-contract object"),
}


def post_inits() -> dict[str, str]:
    """``{owner: "file:line"}`` of every ``__post_init__`` in the product packages; the owner is the
    class (or the function) it is written in."""
    found: dict[str, str] = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for owner in ast.walk(tree):
                if isinstance(owner, (ast.ClassDef, ast.FunctionDef)):
                    for node in owner.body:
                        if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
                            found[owner.name] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_no_product_class_checks_its_values_in_a_post_init():
    extra = {owner: where for owner, where in post_inits().items() if owner not in POST_INIT_ALLOWED}
    assert not extra, (f"__post_init__ in {extra}: declare the checks as field rules and model validators "
                       "(agora.models.validation.settings), or say here why it must stay")


def test_a_settings_class_refuses_a_keyword_it_does_not_have():
    """A misspelt field (``n_agent=4``) was dropped without a word (pydantic's dataclasses ignore
    extra keywords by default): the run went on with the default, n_agents = 2. It is refused as any
    Python class refuses an unknown keyword, a TypeError naming it."""
    from agora.agents.delegation import DelegationConfig
    from agora.runs.bench_plan import BenchConfig

    with pytest.raises(TypeError, match="DelegationConfig: unexpected keyword argument 'n_agent'"):
        DelegationConfig(n_agent=4)
    with pytest.raises(TypeError, match="BenchConfig: unexpected keyword argument 'concurency'"):
        BenchConfig(concurency=3)
    assert DelegationConfig(n_agents=4).n_agents == 4
