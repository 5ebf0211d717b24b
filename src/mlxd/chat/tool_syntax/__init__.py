"""Tool-call syntaxes mlx-lm has no parser for, one module per family of syntaxes."""
