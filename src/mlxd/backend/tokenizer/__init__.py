"""Checkpoint tokenizers loaded through `tokenizers` alone, and the import hook that keeps
transformers out of mlx-lm's import."""
