"""The prefix cache: KV snapshots at prompt boundaries in RAM, their disk tier, the token trie
that finds them, and where a batch's sequences copy their caches."""

from mlxd.backend.prefix.cache import PrefixCache, SnapshotKind
from mlxd.backend.prefix.disk_tier import DiskTier
from mlxd.backend.prefix.snapshot_plan import SnapshotPlan, SnapshotPlans

__all__ = ["DiskTier", "PrefixCache", "SnapshotKind", "SnapshotPlan", "SnapshotPlans"]
