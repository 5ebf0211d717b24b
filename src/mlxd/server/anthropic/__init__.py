"""Anthropic Messages (`routes.router`): schemas, inputs, wire."""
