"""What the agent can call. Every tool reads where it runs from the task-local
session context (``gateway.context``), never from arguments or globals."""
