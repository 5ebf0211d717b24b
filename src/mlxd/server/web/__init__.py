"""The chat page `mlxd serve` shows at / (static files shipped in the package; no build step)."""
