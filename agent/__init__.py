"""Agent loops: the built-in command agent and (later) model backends."""
