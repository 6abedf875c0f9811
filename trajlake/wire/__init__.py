"""Message wire formats shared by ingest and the proxy: chat, Responses, Anthropic, SSE streams.

A conversation read from a harness log and the same conversation recorded live by the proxy must
become the same canonical messages, so both sides map messages through these modules and no
other layer's private code: `chat` (OpenAI chat completions), `responses` (Responses-API items),
`anthropic` (Messages-API blocks), `parts` (content parts, inline media kept by sha256), `sse`
(a stream folded back into its non-stream body), `threads` (calls that resend their history laid
out as message threads) and `values` (the loose value coercions every format needs). Pure Python
over the record types in `trajlake.schema`: nothing here reads files, talks HTTP or imports a
layer above.
"""

from __future__ import annotations

from trajlake.wire.anthropic import assistant_message, canonical_messages, text_and_parts
from trajlake.wire.chat import chat_message, chat_tool_call, name_tool_results
from trajlake.wire.parts import DIGEST_SCHEME, content_fields
from trajlake.wire.responses import ResponsesMessageBuilder
from trajlake.wire.sse import StreamAssembler

__all__ = [
    "DIGEST_SCHEME",
    "ResponsesMessageBuilder",
    "StreamAssembler",
    "assistant_message",
    "canonical_messages",
    "chat_message",
    "chat_tool_call",
    "content_fields",
    "name_tool_results",
    "text_and_parts",
]
