"""The model-client protocol (`model_client`) and its two clients: `in_process` (the
CLI's own engine) and `http_model` (a server, decoded by `chat_chunks`)."""
