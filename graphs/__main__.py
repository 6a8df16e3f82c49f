"""``python -m agora.graphs [--write [PATH]]``: the Studio config (``langgraph.json``) generated from
the protocol registry, printed, or written to PATH (default ``langgraph.json``) only once it is built
(a protocol module that fails to import leaves the old file as it was)."""

import json
import sys

from agora.graphs.registry import langgraph_config, write_langgraph_json

if len(sys.argv) > 1 and sys.argv[1] == "--write":
    print(write_langgraph_json(sys.argv[2] if len(sys.argv) > 2 else "langgraph.json"))
else:
    print(json.dumps(langgraph_config(), indent=2, ensure_ascii=False))
