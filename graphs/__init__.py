"""The games: one module per protocol, each building a LangGraph ``StateGraph`` from ``agora.agents``
parts. Graphs are exported without a checkpointer (LangGraph Studio and the caller add their own).

Public surface::

    from agora.graphs.delegation import build_delegation_graph, DelegationContext
"""
