"""Training from traces: read the trace store, write TRL DPO/GRPO datasets, run trainers, load
adapters back into the pool."""
