"""The operator's side: the ``homing`` command line, setup and doctor."""
