"""The message path: authorize, resolve the session, run a turn in the conversation's
lane, answer commands.
"""
