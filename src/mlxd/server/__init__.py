"""`mlxd serve`: the OpenAI-compatible HTTP server (app factory in `mlxd.server.app`).

Nothing here is imported by the CLI start-up path; fastapi and uvicorn load with the server.
"""
