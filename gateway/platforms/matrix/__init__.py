"""Matrix, through matrix-nio: ``/sync`` in, the client-server API out.

matrix-nio rather than mautrix: it is asyncio on aiohttp like the rest of the gateway
(slack-sdk, discord.py), small, and typed enough; mautrix's strength is end-to-end
encryption and bridging, neither of which is used here — encrypted rooms are detected,
said to be unsupported once, and never read (``adapter.py``).
"""
