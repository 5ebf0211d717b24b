"""Bounded field types every API's wire schemas share (pydantic): strict, finite, bounded.

The bounds are config.SAMPLING_BOUNDS and config.LIMITS, as in mlxd.chat.options.OPTIONS.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic.fields import FieldInfo

from mlxd.config import LIMITS, SAMPLING_BOUNDS

# Every API's wire shapes: unknown fields ignored (as OpenAI and Anthropic do), no NaN/inf.
WIRE_CONFIG = ConfigDict(extra="ignore", allow_inf_nan=False)


class WireModel(BaseModel):
    """A wire shape of any API: unknown fields ignored, no NaN/inf (WIRE_CONFIG)."""

    model_config = WIRE_CONFIG


class RefusedKind(WireModel):
    """A kind of content mlxd cannot take: refused with a 400 naming it, never dropped."""

    refusal: ClassVar[str] = "'{type}' content is not supported"
    type: str

    @model_validator(mode="after")
    def _refuse(self) -> Self:
        raise ValueError(self.refusal.format(type=self.type))


MAX_MESSAGES = 10_000  # messages in one request
MAX_TOOLS = 512  # tools in one request


def within(name: str) -> FieldInfo:
    """Field bounds of one option: the range the option table and the engine check too."""
    b = SAMPLING_BOUNDS[name]
    bounds: FieldInfo = Field(gt=b.low, le=b.high) if b.low_open else Field(ge=b.low, le=b.high)
    return bounds


MaxTokens = Annotated[StrictInt, within("max_tokens")]
Temperature = Annotated[StrictFloat, within("temperature")]
TopP = Annotated[StrictFloat, within("top_p")]
TopK = Annotated[StrictInt, within("top_k")]
Seed = Annotated[StrictInt, within("seed")]
TopLogprobs = Annotated[StrictInt, within("top_logprobs")]
StopText = Annotated[StrictStr, Field(min_length=1, max_length=LIMITS["stop_string_chars"])]
ModelName = Annotated[StrictStr, Field(min_length=1, max_length=512)]
FunctionName = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
CallId = Annotated[StrictStr, Field(min_length=1, max_length=256)]  # a tool call's id
# A body may list this many stop strings; the operator's max_stop_strings is checked after.
StopList = Annotated[list[StopText], Field(max_length=256)]


class JsonSchemaFormat(BaseModel):
    """OpenAI's json_schema response format; the schema itself is checked when it compiles."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_\-]{1,64}$")] = "response"
    description: StrictStr | None = None
    schema_: dict[str, Any] | StrictBool = Field(alias="schema")
    strict: StrictBool | None = None


def refused_when_set(field: str, message: str) -> Any:
    """A field validator (assign it in a request model) refusing `field` with `message` when the
    client sets it to anything truthy: the fields an API defines and mlxd does not serve."""

    from pydantic import field_validator

    def refuse(value: Any) -> Any:
        if value:
            raise ValueError(message)
        return value

    return field_validator(field)(refuse)


Number = StrictFloat | StrictInt  # a JSON number, an integer or not (never a bool or a string)
