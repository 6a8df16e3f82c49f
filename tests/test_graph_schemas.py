"""Every registered graph (what langgraph.json lists, generated from the registry: tests/test_registry.py
checks the file) imports from its Studio path, compiles without a checkpointer and has the JSON
schemas LangGraph Studio draws its forms from (input, output, context): every input and context
field described (nested settings included), every output field described, enumerations as enums,
and a worked example in the input schema."""

import importlib.util
import sys
from pathlib import Path

import pytest

from agora.graphs import registry

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = registry.langgraph_config()["graphs"]  # the registry, so a new protocol is checked before the file is regenerated


def load(spec):
    path, attr = (spec["path"] if isinstance(spec, dict) else spec).split(":")
    module_spec = importlib.util.spec_from_file_location(f"_studio_{Path(path).stem}", ROOT / path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up while the file runs
    module_spec.loader.exec_module(module)
    return getattr(module, attr)


def undescribed(schema: dict, defs: dict, path: str, seen: frozenset = frozenset()) -> list[str]:
    """Dotted paths of the fields of ``schema`` (and of every object nested in it, through ``$ref``,
    ``anyOf``, arrays and maps) that have no ``description``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return [] if name in seen else undescribed(defs[name], defs, path, seen | {name})
    missing = []
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            missing += undescribed(option, defs, path, seen)
    if isinstance(schema.get("items"), dict):
        missing += undescribed(schema["items"], defs, path + "[]", seen)
    if isinstance(schema.get("additionalProperties"), dict):
        missing += undescribed(schema["additionalProperties"], defs, path + "{}", seen)
    for name, prop in schema.get("properties", {}).items():
        if not prop.get("description"):
            missing.append(f"{path}.{name}")
        missing += undescribed(prop, defs, f"{path}.{name}", seen)
    return missing


@pytest.mark.parametrize("graph_id", sorted(GRAPHS))
def test_graph_exports_schemas_without_checkpointer(graph_id):
    spec = GRAPHS[graph_id]
    assert isinstance(spec, dict) and spec.get("description"), f"{graph_id}: give it a description"
    graph = load(spec)
    assert graph.checkpointer is None, f"{graph_id} is compiled with a checkpointer; langgraph dev refuses that"
    assert graph.get_input_jsonschema()["type"] == "object"
    assert graph.get_output_jsonschema()["type"] == "object"
    pool = graph.get_context_jsonschema()["properties"]["pool"]  # Studio's context form: a name or a file path
    assert {"type": "string"} in pool["anyOf"] and {"type": "null"} in pool["anyOf"], pool
    assert "tiny" in pool["description"] and "pool-file path" in pool["description"]
    assert graph.get_graph(xray=1).draw_mermaid().startswith("---")


@pytest.mark.parametrize("spec", registry.specs(), ids=registry.names())
def test_every_input_and_context_field_has_a_description(spec):
    graph = spec.compiled()
    for kind in ("input", "context"):
        schema = getattr(graph, f"get_{kind}_jsonschema")()
        assert not undescribed(schema, schema.get("$defs", {}), f"{spec.name}.{kind}"), (
            "give these fields a docstring (it becomes the JSON-schema description Studio shows)")
    output = graph.get_output_jsonschema()
    assert all(prop.get("description") for prop in output["properties"].values()), output["properties"]


@pytest.mark.parametrize("spec", registry.specs(), ids=registry.names())
def test_input_schema_shows_a_worked_example_that_fits_it(spec):
    schema = spec.compiled().get_input_jsonschema()
    [example] = schema["examples"]
    assert set(schema.get("required", [])) <= set(example) <= set(schema["properties"])
    if "kind" in schema["properties"]:  # the answer kind is a choice, not a free string
        kind = schema["properties"]["kind"]
        assert kind["enum"] == ["math", "mc", "open"] and kind["type"] == "string", kind
        assert example["kind"] in kind["enum"]


def test_settings_descriptions_come_from_the_field_docstrings():
    schema = registry.get("align").compiled().get_context_jsonschema()
    settings = schema["$defs"]["DelegationConfig"]["properties"]
    assert settings["tau"]["description"] == "Committed acceptance threshold on the principal's utility U, in [0, 1]."
    assert settings["top_p"]["description"].startswith("Nucleus sampling")  # no docstring: the shared description
