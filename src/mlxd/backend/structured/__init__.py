"""Output constraints: grammars compiled with llguidance and the per-row mask that applies them."""
