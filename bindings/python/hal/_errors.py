"""hal.Error and one subclass per HAL result code (hal_result_t in api/hal/result.h).

A failing HAL call raises the subclass of its result code, e.g. HAL_ERROR_OUT_OF_BOUNDS
raises hal.OutOfBoundsError. tests/test_errors.py checks that every code of HAL's name
table has its class here.
"""
from __future__ import annotations


class Error(Exception):
    """A HAL call failed: code (the hal_result_t value), name (its enumerator), message (the
    loader's sentence), function (the public function that failed), plugin (who reported it,
    "loader", a plugin's name, or "bindings" for a rule of the bindings) and native_code (the
    vendor's own code, 0 when none)."""

    code: int = -1
    name: str = "HAL_RESULT_UNKNOWN"

    def __init__(self, message: str = "", function: str = "", plugin: str = "",
                 native_code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.function = function
        self.plugin = plugin
        self.native_code = native_code

    def __str__(self) -> str:
        where = f"{self.function}: " if self.function and not self.message.startswith(
            self.function) else ""
        return f"{self.name}: {where}{self.message}"


class InvalidArgumentError(Error, ValueError):
    code, name = 2, "HAL_ERROR_INVALID_ARGUMENT"


class NullPointerError(Error, ValueError):
    code, name = 3, "HAL_ERROR_NULL_POINTER"


class InvalidHandleError(Error):
    code, name = 4, "HAL_ERROR_INVALID_HANDLE"


class DestroyedHandleError(Error):
    code, name = 5, "HAL_ERROR_DESTROYED_HANDLE"


class InvalidSizeError(Error, ValueError):
    code, name = 6, "HAL_ERROR_INVALID_SIZE"


class OutOfBoundsError(Error, IndexError):
    code, name = 7, "HAL_ERROR_OUT_OF_BOUNDS"


class OutOfMemoryError(Error, MemoryError):
    code, name = 8, "HAL_ERROR_OUT_OF_MEMORY"


class UnsupportedError(Error, BufferError):
    code, name = 9, "HAL_ERROR_UNSUPPORTED"


class NotInitializedError(Error):
    code, name = 10, "HAL_ERROR_NOT_INITIALIZED"


class PluginLoadError(Error):
    code, name = 11, "HAL_ERROR_PLUGIN_LOAD"


class AbiMismatchError(Error):
    code, name = 12, "HAL_ERROR_ABI_MISMATCH"


class InvalidModuleError(Error):
    code, name = 13, "HAL_ERROR_INVALID_MODULE"


class NotFoundError(Error, LookupError):
    code, name = 14, "HAL_ERROR_NOT_FOUND"


class InvalidLaunchError(Error, ValueError):
    code, name = 15, "HAL_ERROR_INVALID_LAUNCH"


class ArgumentMismatchError(Error, TypeError):
    code, name = 16, "HAL_ERROR_ARGUMENT_MISMATCH"


class DeviceMismatchError(Error, ValueError):
    code, name = 17, "HAL_ERROR_DEVICE_MISMATCH"


class InvalidStateError(Error):
    code, name = 18, "HAL_ERROR_INVALID_STATE"


class TimeoutError(Error, TimeoutError):  # noqa: A001 - the builtin is a base too
    code, name = 19, "HAL_ERROR_TIMEOUT"


class DeviceLostError(Error):
    code, name = 20, "HAL_ERROR_DEVICE_LOST"


class InternalError(Error):
    code, name = 21, "HAL_ERROR_INTERNAL"


class RemoteError(Error):
    code, name = 22, "HAL_ERROR_REMOTE"


ERRORS: dict[int, type[Error]] = {
    cls.code: cls for cls in Error.__subclasses__()  # type: ignore[misc]
}


def _make(code: int, message: str, function: str, plugin: str, native_code: int) -> Error:
    """Called by the extension: the exception object for a failed call."""
    cls = ERRORS.get(code)
    if cls is None:  # a code newer than this table: still an Error, with its number
        error = Error(message, function, plugin, native_code)
        error.code, error.name = code, f"HAL_RESULT_{code}"
        return error
    return cls(message, function, plugin, native_code)


# One literal list, so type checkers see the classes (tests/test_devices_errors.py checks it
# names every class of ERRORS).
__all__ = [
    "Error", "ERRORS", "InvalidArgumentError", "NullPointerError", "InvalidHandleError",
    "DestroyedHandleError", "InvalidSizeError", "OutOfBoundsError", "OutOfMemoryError",
    "UnsupportedError", "NotInitializedError", "PluginLoadError", "AbiMismatchError",
    "InvalidModuleError", "NotFoundError", "InvalidLaunchError", "ArgumentMismatchError",
    "DeviceMismatchError", "InvalidStateError", "TimeoutError", "DeviceLostError",
    "InternalError", "RemoteError",
]
