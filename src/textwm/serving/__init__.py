"""Serving world models: the native OpenAI-compatible server, the WM proxy, launchers for native | lmdeploy | vLLM.

Run as ``python -m textwm.serving {server,proxy,stack}`` (no checkout path needed); the HTTP clients
are in :mod:`textwm.clients`.
"""
