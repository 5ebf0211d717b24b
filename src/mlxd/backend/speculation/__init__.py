"""Speculative decoding: which rows draft, what they propose (n-grams or a draft model), and
how wide each verify step is."""
