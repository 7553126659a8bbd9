"""Status codes and the one exception type the library raises."""
from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """Mirror of ``HIPDNN_STATUS_*`` with the same numbers."""

    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__

    SUCCESS = 0
    NOT_INITIALIZED = 1
    BAD_PARAM = 2
    BAD_PARAM_NULL_POINTER = 3
    BAD_PARAM_NOT_FINALIZED = 4
    BAD_PARAM_OUT_OF_BOUND = 5
    BAD_PARAM_SIZE_INSUFFICIENT = 6
    BAD_PARAM_STREAM_MISMATCH = 7
    NOT_SUPPORTED = 8
    INTERNAL_ERROR = 9
    ALLOC_FAILED = 10
    INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 11
    INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 12
    EXECUTION_FAILED = 13
    PLUGIN_ERROR = 14
    VERSION_MISMATCH = 15


class HipdnnError(Exception):
    """Every failure the library reports.

    Attributes:
        status: the :class:`Status` code, kept intact up to the caller.

    Example:
        >>> try:
        ...     raise HipdnnError(Status.BAD_PARAM, "tensor 'X': dims must be positive")
        ... except HipdnnError as e:
        ...     e.status.name
        'BAD_PARAM'
    """

    def __init__(self, status: Status, message: str):
        self.status = Status(status)
        self.message = message
        super().__init__(f"[{self.status.name}] {message}")
