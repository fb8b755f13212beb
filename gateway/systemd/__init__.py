"""Talking to systemd: the notify protocol while running, and the unit ``homing
service`` installs.
"""
