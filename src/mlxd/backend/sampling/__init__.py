"""Per-request samplers, logits processors and seeded draws over a whole batch."""
