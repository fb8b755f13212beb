"""The way in: every accepted message journaled before anything else, checked, and
replayed after a crash.
"""
