"""The agent writes Markdown; each platform gets it in the form it shows.

One parser (markdown-it-py, raw HTML off) for every platform, and one renderer
per platform: Telegram's HTML subset, Discord's own Markdown, the web page's
safe HTML. A reply still being written goes through ``preview`` first, then the
same renderer as the final message.
"""
