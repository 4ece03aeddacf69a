"""The typed wire shapes name exactly the fields the wire checks accept: a field added to one and
not the other (or required in one, optional in the other) fails here."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.protocol import wire_checks, wire_types

# (shape, its check, whether the check's `by_type` adds the `type` field)
PAIRS = [
    (wire_types.TextContent, wire_checks.TEXT, True),
    (wire_types.ImageContent, wire_checks.MEDIA, True),
    (wire_types.AudioContent, wire_checks.MEDIA, True),
    (wire_types.ResourceLink, wire_checks.RESOURCE_LINK, True),
    (wire_types.EmbeddedResource, wire_checks.EMBEDDED, True),
    (wire_types.ToolUseContent, wire_checks.TOOL_USE, True),
    (wire_types.ToolResultContent, wire_checks.TOOL_RESULT, True),
    (wire_types.SamplingMessage, wire_checks.SAMPLING_MESSAGE, False),
    (wire_types.ModelPreferences, wire_checks.MODEL_PREFERENCES, False),
    (wire_types.Tool, wire_checks.TOOL, False),
    (wire_types.TaskMetadata, wire_checks.TASK, False),
    (wire_types.Annotations, wire_checks.ANNOTATIONS, False),
    (wire_types.CreateMessageParams, wire_checks.CREATE_MESSAGE, False),
    (wire_types.ElicitFormParams, wire_checks.ELICIT_FORM, False),
    (wire_types.ElicitUrlParams, wire_checks.ELICIT_URL, False),
]


@pytest.mark.parametrize(("shape", "check", "typed_block"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_a_typed_shape_has_the_fields_its_check_accepts(
    shape: type, check: wire_checks.Shape, typed_block: bool
) -> None:
    required = set(check.required) | ({"type"} if typed_block else set())
    fields = set(shape.__annotations__)
    assert fields == required | set(check.optional)
    assert set(shape.__required_keys__) == required  # type: ignore[attr-defined]
