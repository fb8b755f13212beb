"""The machine the daemon runs on: whether a process is still the one recorded, and
files only the operator may read.
"""
