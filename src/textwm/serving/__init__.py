"""Serving world models: OpenAI-compatible clients (and, later, the native server and WM proxy)."""
