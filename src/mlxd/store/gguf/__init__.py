"""Import a llama GGUF file into an MLX checkpoint in the store: `importer.import_gguf`.

`format` (the import markers) stays light for store scans; the rest loads numpy and gguf,
so nothing is re-exported here.
"""
