"""The adapter conformance suite: one set of cases (``test_contract.py``) that every
platform adapter passes against its fake server, through a harness (``harness.py``)
per platform. Adding a platform: see ``harness.py``."""
