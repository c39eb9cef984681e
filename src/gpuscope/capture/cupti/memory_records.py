"""CUPTI's memory records (``CUPTI_ACTIVITY_KIND_MEMORY2``, ``MEMORY_POOL``): the struct versions gpuscope reads.

Every ``cudaMalloc``/``cudaFree``, ``cuMemAlloc``/``cuMemFree``, ``cudaMallocAsync``/``cudaFreeAsync``,
``cudaHostAlloc`` and ``cudaMallocManaged`` of the process, whatever library asked (PyTorch's cached
segments, cuBLAS workspaces, CuPy's pool, NCCL), comes as one record with its address, size, device,
stream (async) and CUPTI timestamp; memory pools of the async allocator as records of their creation,
trimming and destruction.

CUPTI 13 writes ``CUpti_ActivityMemory4`` (128 bytes: version 3 and the ``source`` library that asked),
which cupti-python 13 knows; CUPTI 12 writes ``CUpti_ActivityMemory3`` (120 bytes), which cupti-python 13
no longer has, so its layout is given here, field by field as ``cupti_activity_deprecated.h`` declares it
(packed, 8-byte aligned, LP64): the record walk tells the two apart by their size.
"""

from __future__ import annotations

import numpy as np

_POOL_CONFIG = np.dtype({
    "names": ["memory_pool_type", "pad2", "address", "release_threshold", "pool", "utilized_size"],
    "formats": ["<i4", "<u4", "<u8", "<u8", np.dtype({"names": ["size_"], "formats": ["<u8"], "offsets": [0],
                                                      "itemsize": 8}), "<u8"],
    "offsets": [0, 4, 8, 16, 24, 32],
    "itemsize": 40,
})

# CUpti_ActivityMemory3: kind, memoryOperationType, memoryKind, correlationId (u32 each), address, bytes,
# timestamp, PC (u64), processId, deviceId, contextId, streamId (u32), name (const char *), isAsync, pad1 (u32),
# memoryPoolConfig {memoryPoolType, pad2, address, releaseThreshold, pool.size | pool.processId, utilizedSize}
MEMORY3 = np.dtype({
    "names": ["kind", "memory_operation_type", "memory_kind", "correlation_id", "address", "bytes", "timestamp", "pc",
              "process_id", "device_id", "context_id", "stream_id", "name", "is_async", "pad1", "memory_pool_config"],
    "formats": ["<i4", "<i4", "<i4", "<u4", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<i8", "<u4",
                "<u4", _POOL_CONFIG],
    "offsets": [0, 4, 8, 12, 16, 24, 32, 40, 48, 52, 56, 60, 64, 72, 76, 80],
    "itemsize": 120,
})

# Struct versions of memory records that a cupti-python may lack, by the class name it would give them.
EXTRA_STRUCTS: dict[str, np.dtype] = {"ActivityMemory3": MEMORY3}
