"""OpenAI chat and text completions (`routes.router`): schemas, inputs, wire."""
