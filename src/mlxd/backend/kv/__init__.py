"""The KV cache's precision: quantized attention KV inside the continuous batch."""

from mlxd.backend.kv.footprint import cache_footprint, kv_footprint
from mlxd.backend.kv.full_tail import BatchFullTailKVCache, RowFullTailKVCache
from mlxd.backend.kv.model_cache import kv_quantization, quantize_kv
from mlxd.backend.kv.quantized_batch import BatchQuantizedKVCache, RowQuantizedKVCache

__all__ = [
    "BatchFullTailKVCache",
    "BatchQuantizedKVCache",
    "RowFullTailKVCache",
    "RowQuantizedKVCache",
    "cache_footprint",
    "kv_footprint",
    "kv_quantization",
    "quantize_kv",
]
