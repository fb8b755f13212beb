"""Platform adapters: one module per platform, all behind :class:`Adapter`."""
