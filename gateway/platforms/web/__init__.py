"""The built-in web chat: an aiohttp server, its WebSocket and REST API, and the page."""
