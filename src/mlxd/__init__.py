"""mlxd: one MLX inference engine behind your terminal and your API."""

__version__ = "0.1.0"
__all__ = ["__version__"]
