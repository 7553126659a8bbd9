"""What every part of the facade shares: the default handle and the error translation."""
from __future__ import annotations

import functools


from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.cudnn._enums import cudnnGraphNotSupportedError
from hipdnn_iree.cudnn._handle import Handle, create_handle
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

_DEFAULT = {}


def _default_handle() -> Handle:
    if "h" not in _DEFAULT:
        _DEFAULT["h"] = create_handle()
    return _DEFAULT["h"]


def _translate(fn):
    """NOT_SUPPORTED from below surfaces as cudnnGraphNotSupportedError (still an hd.HipdnnError)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except cudnnGraphNotSupportedError:
            raise
        except HipdnnError as e:
            from hipdnn_iree.cudnn._handle import _LAST_ERROR
            _LAST_ERROR[0] = e.message
            if e.status == Status.NOT_SUPPORTED:
                raise cudnnGraphNotSupportedError(e.message) from None
            if not isinstance(e, RuntimeError):
                raise E.cudnnError(e.status, e.message) from None
            raise
    return wrapper


def _unsupported(what: str):
    raise cudnnGraphNotSupportedError(what)
