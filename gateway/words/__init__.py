"""The words every part of the gateway speaks: a conversation's route and session key,
a session's lifetime, the events adapters hand in, and the task-local session
context.
"""
