"""Slack, through slack-sdk: Socket Mode in, the Web API out; the adapter and what it
shows and sends."""
