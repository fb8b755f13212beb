"""Several instances on one shared store: their lives, leases and fencing, and taking
over what a dead one left.
"""
