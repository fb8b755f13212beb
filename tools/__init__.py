"""What the agent can call. Every tool reads where it runs from the task-local
session context (``gateway.words.context``), never from arguments or globals."""
