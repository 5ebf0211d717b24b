"""Every private mlx-lm member mlxd touches, in one place: the upgrade boundary (mlx-lm is
pinned in pyproject.toml; its pin test fails loudly when an upgrade changes these)."""
