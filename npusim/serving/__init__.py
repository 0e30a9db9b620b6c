"""LLM serving: architectures (spec), one iteration's graph (iteration), batching (server)."""
