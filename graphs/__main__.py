"""``python -m agora.graphs > langgraph.json``: the Studio config generated from the protocol registry."""

import json

from agora.graphs.registry import langgraph_config

print(json.dumps(langgraph_config(), indent=2, ensure_ascii=False))
