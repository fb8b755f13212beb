"""``python -m gateway.cli``: what installed systemd units run, so it stays."""

from gateway.cli.main import main

raise SystemExit(main())
