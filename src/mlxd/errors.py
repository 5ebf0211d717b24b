"""MlxdError and subclasses: each maps to one CLI exit code and one HTTP status."""

from __future__ import annotations

INVALID = "invalid_request_error"  # the error_type of a request the caller must change
SERVER = "server_error"


def one_line(exc: BaseException | None, *, with_type: bool = True, whole: bool = False) -> str:
    """`TypeName: first line of the message` (the one way an exception becomes one line);
    with_type=False: the message alone; whole=True: every line of it, joined by spaces. Never
    empty: a bare exception gives its type name."""
    if exc is None:
        return "unknown error"
    lines = str(exc).split() if whole else str(exc).strip().splitlines()[:1]
    if not lines:
        return type(exc).__name__
    text = " ".join(lines)
    return f"{type(exc).__name__}: {text}" if with_type else text


class MlxdError(Exception):
    """A user-facing failure: its message is one clear line.

    A subclass states the exit code, HTTP status and error type that differ from its base's
    in its class line (`class X(Base, exit_code=3, http_status=404)`) and its own `code`."""

    exit_code = 1
    http_status = 500
    error_type = SERVER
    code: str | None = None

    def __init_subclass__(
        cls,
        *,
        exit_code: int | None = None,
        http_status: int | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init_subclass__()
        cls.exit_code = cls.exit_code if exit_code is None else exit_code
        cls.http_status = cls.http_status if http_status is None else http_status
        cls.error_type = cls.error_type if error_type is None else error_type

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def to_dict(self) -> dict[str, object]:
        return {
            "message": self.message,
            "type": self.error_type,
            "param": self.param,
            "code": self.code,
        }


class InvalidRequest(MlxdError, exit_code=2, http_status=400, error_type=INVALID):
    code = "invalid_request"


class ModelNotFound(MlxdError, exit_code=3, http_status=404, error_type=INVALID):
    code = "model_not_found"


class AmbiguousModel(ModelNotFound):
    code = "ambiguous_model"


class ModelBroken(MlxdError, exit_code=4, http_status=422, error_type=INVALID):
    """The model is on disk but cannot be used: corrupt, incomplete, or unsupported."""

    code = "model_unusable"


class ModelRefused(ModelBroken):
    """The model ships code (auto_map, model_file, pickles) and trust was not given."""

    code = "model_refused"


class ModelTooLarge(ModelBroken):
    """The model's weights do not fit in the memory this process may use."""

    code = "model_too_large"


class ContextOverflow(InvalidRequest):
    """The prompt leaves no room to generate: `prompt_tokens` (`at_least`: a lower bound,
    counted before tokenizing) against the model's `window`, for each API's own wording."""

    code = "context_length_exceeded"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        prompt_tokens: int | None = None,
        window: int | None = None,
        at_least: bool = False,
    ) -> None:
        super().__init__(message, param=param)
        self.prompt_tokens = prompt_tokens
        self.window = window
        self.at_least = at_least


class TemplateError(InvalidRequest):
    code = "template_error"


class EngineBusy(MlxdError, exit_code=5, http_status=429, error_type="rate_limit_error"):
    code = "queue_full"


class EngineUnavailable(MlxdError, exit_code=5, http_status=503):
    """Shutting down or failed: new requests are refused."""

    code = "unavailable"


class EngineFault(MlxdError, exit_code=6, http_status=500):
    code = "engine_error"


class DownloadError(MlxdError, exit_code=7, http_status=502):
    code = "download_failed"


class UploadError(MlxdError, exit_code=7, http_status=502):
    code = "upload_failed"


class AuthError(MlxdError, exit_code=8, http_status=401, error_type="authentication_error"):
    code = "invalid_api_key"


def _with_subclasses(cls: type[MlxdError]) -> list[type[MlxdError]]:
    return [cls] + [c for sub in cls.__subclasses__() for c in _with_subclasses(sub)]


# MlxdError.code -> class, for the errors declared here (the ones the engine and chat layer
# report). Built once, at import, so it never depends on which other modules were imported.
_BY_CODE: dict[str, type[MlxdError]] = {
    cls.code: cls for cls in _with_subclasses(MlxdError) if cls.code is not None
}


def from_code(code: str | None, message: str | None) -> MlxdError:
    """The error a stream reported as a code (FinishEvent.error_code), rebuilt as the class that
    would have been raised, so it gets the same CLI exit code and HTTP status. Unknown or
    missing codes are an EngineFault."""
    return _BY_CODE.get(code or "", EngineFault)(message or "generation failed")


# HTTP status -> the error a server's answer stands for when its code is not one of ours
# (another server, a proxy): each class's own status, plus what proxies and other servers
# answer with (a bad or slow gateway is an unavailable server here, not a failed download);
# any other 4xx is an InvalidRequest, anything else an EngineFault.
_OWN_STATUS: tuple[type[MlxdError], ...] = (
    AuthError,
    ModelNotFound,
    ModelBroken,
    EngineBusy,
    EngineUnavailable,
)
_BY_STATUS: dict[int, type[MlxdError]] = {cls.http_status: cls for cls in _OWN_STATUS}
_BY_STATUS.update({403: AuthError, 502: EngineUnavailable, 504: EngineUnavailable})


def from_http(status: int, code: str | None, message: str) -> MlxdError:
    """The error an HTTP server answered with (its status and its OpenAI error body's code),
    rebuilt as the class that would have been raised in-process (from_code's), so the CLI
    exit code matches; by status when the code is not one of ours."""
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status)
    if cls is None:
        cls = InvalidRequest if 400 <= status < 500 else EngineFault
    return cls(message)
