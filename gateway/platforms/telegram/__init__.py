"""Telegram, through python-telegram-bot: the adapter and what it shows and sends."""
