"""Every registered graph (what langgraph.json lists, generated from the registry: tests/test_registry.py
checks the file) imports from its Studio path, compiles without a checkpointer and has the JSON
schemas LangGraph Studio asks for (input, output, context)."""

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


@pytest.mark.parametrize("graph_id", sorted(GRAPHS))
def test_graph_exports_schemas_without_checkpointer(graph_id):
    spec = GRAPHS[graph_id]
    assert isinstance(spec, dict) and spec.get("description"), f"{graph_id}: give it a description"
    graph = load(spec)
    assert graph.checkpointer is None, f"{graph_id} is compiled with a checkpointer; langgraph dev refuses that"
    assert graph.get_input_jsonschema()["type"] == "object"
    assert graph.get_output_jsonschema()["type"] == "object"
    assert graph.get_context_jsonschema()["properties"]["pool"]["type"] == "null"  # Studio's context form
    assert graph.get_graph(xray=1).draw_mermaid().startswith("---")
