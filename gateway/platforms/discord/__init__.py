"""Discord, through discord.py: the adapter and what it shows and sends."""
