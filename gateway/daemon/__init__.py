"""The daemon as a whole: the composition root that builds every part and hands each
what it needs, the order parts start and stop in, and what a restart or a dead
instance leaves to do.
"""
