"""The way back: notifications stored first, the one ownership rule, the outbox and the
router that delivers them.
"""
