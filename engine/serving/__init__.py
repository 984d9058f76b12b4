"""The engine's OpenAI serving layer over `LLMEngine`: `AsyncEngine` (the engine on its own thread),
`OpenAIServing` (OpenAI bodies in, responses and chunks out), the aiohttp server, the CLI and its metrics.

Callers outside the engine import these names from `engine` (engine/__init__.py), not from here.
"""
