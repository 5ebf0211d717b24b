"""OpenAI Responses (`routes.router`): schemas, inputs, wire."""
