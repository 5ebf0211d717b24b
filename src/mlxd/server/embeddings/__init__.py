"""OpenAI's embeddings API (`POST /v1/embeddings`) on the engine's embedding path."""
