"""Helpers of the tests of gpuscope's C subscriber (capture/cupti/handoff.c)."""

from __future__ import annotations

import ctypes


class CallbackData(ctypes.Structure):
    """CUpti_CallbackData as CUPTI passes it to a callback of the driver or runtime domain."""

    _fields_ = [("site", ctypes.c_int32), ("function_name", ctypes.c_char_p), ("params", ctypes.c_void_p),
                ("return_value", ctypes.c_void_p), ("symbol_name", ctypes.c_char_p), ("context", ctypes.c_void_p),
                ("context_uid", ctypes.c_uint32), ("correlation_data", ctypes.c_void_p),
                ("correlation_id", ctypes.c_uint32)]
