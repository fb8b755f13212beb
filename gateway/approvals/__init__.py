"""Approvals: an action of the model that waits in the store until a human decides."""
