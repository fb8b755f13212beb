"""Relay: an example chat platform for Homing, in a package of its own."""
