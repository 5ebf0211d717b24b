"""Speculative decoding: which rows draft, what they propose (n-grams or a draft model), and
how wide each verify step is."""

from mlxd.backend.speculation.draft_model import batch_drafts
from mlxd.backend.speculation.draft_policy import draft_policy_every
from mlxd.backend.speculation.drafts import Drafts

__all__ = ["Drafts", "batch_drafts", "draft_policy_every"]
