"""Ollama's API under /api/ (chat, generate, the model list): the same chat layer as /v1."""
