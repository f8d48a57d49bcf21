"""Chat formatting: a conversation -> token ids (+ the loss mask SFT trains on),
and the ids that end a reply.

One place decides each model family's format and stop ids: `template_for(family)` names the
template, `tunix_lite.load` stores that name on the tokenizer (`tokenizer.chat_template`), and every
function here uses it unless a template is passed. Special tokens are written as ids and only the
plain text between them is encoded, so message text can never smuggle in a control token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

@dataclass(frozen=True)
class ChatTemplate:
    """How a model family writes a conversation.

    `turn_prefix` / `turn_suffix` surround every message ("{role}" is replaced by the role name) and
    may contain the special pieces listed in `specials`, which become single ids. Message text never
    does.
    """

    name: str
    bos: str | None  # special piece written once at the start
    turn_prefix: str
    turn_suffix: str
    specials: tuple[str, ...]
    stop: tuple[str, ...]  # pieces besides eos that end a model reply
    assistant_role: str = "assistant"
    # no system role: prepend "{system}\n\n" to the first user message
    system_in_first_user: bool = False
    strip_content: bool = False  # the HF template trims whitespace around each message


TEMPLATES = {
    # <bos><start_of_turn>user\n{msg}<end_of_turn>\n<start_of_turn>model\n{answer}<end_of_turn>\n
    "gemma": ChatTemplate(
        name="gemma",
        bos="<bos>",
        turn_prefix="<start_of_turn>{role}\n",
        turn_suffix="<end_of_turn>\n",
        specials=("<start_of_turn>", "<end_of_turn>"),
        stop=("<end_of_turn>",),
        assistant_role="model",
        system_in_first_user=True,
        strip_content=True,
    ),
    # Llama 3.0's format. 3.1+ templates also add a "Cutting Knowledge Date" system block;
    # we do not.
    "llama3": ChatTemplate(
        name="llama3",
        bos="<|begin_of_text|>",
        turn_prefix="<|start_header_id|>{role}<|end_header_id|>\n\n",
        turn_suffix="<|eot_id|>",
        specials=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        stop=("<|eot_id|>",),
        strip_content=True,
    ),
    # Plain ChatML. Qwen 3's HF template also manages <think> blocks;
    # we leave reasoning text as written.
    "qwen3": ChatTemplate(
        name="qwen3",
        bos=None,
        turn_prefix="<|im_start|>{role}\n",
        turn_suffix="<|im_end|>\n",
        specials=("<|im_start|>", "<|im_end|>"),
        stop=("<|im_end|>",),
    ),
}


# ModelConfig.family -> template
FAMILY_TEMPLATES = {"gemma2": "gemma", "gemma3": "gemma", "llama3": "llama3", "qwen3": "qwen3"}


def template_for(family: str) -> str:
    """The chat template a model family writes its conversations in."""
    try:
        return FAMILY_TEMPLATES[family]
    except KeyError:
        raise ValueError(f"no chat template for model family {family!r}; "
                         f"known: {sorted(FAMILY_TEMPLATES)}") from None


def format_chat(tokenizer, messages, *, template: str | ChatTemplate | None = None,
                add_generation_prompt=True):
    """Token ids of a conversation `[{"role": "user"|"assistant"|"system", "content": str}, ...]`.

    With add_generation_prompt, ends with the header of a model turn (`<start_of_turn>model\\n`),
    ready to sample the reply.
    """
    ids, _ = format_chat_with_mask(tokenizer, messages, template=template,
                                   add_generation_prompt=add_generation_prompt)
    return ids


def format_chat_with_mask(tokenizer, messages, *, template: str | ChatTemplate | None = None,
                          add_generation_prompt=False):
    """(ids, completion_mask): mask is 1 on the tokens SFT trains on, the assistant replies and the
    stop token that closes each (so the model learns to stop), and 0 elsewhere.

    Role headers and replies are encoded separately, as at inference time, where the prompt ends
    with the header and the reply is sampled from there.
    """
    tpl = _template(tokenizer, template)
    stop = {tokenizer.piece_to_id(p) for p in tpl.stop}
    ids, mask = [], []

    def emit(new_ids, trainable=False):
        ids.extend(new_ids)
        mask.extend(int(trainable) for _ in new_ids)

    if tpl.bos is not None:
        emit([tokenizer.piece_to_id(tpl.bos)])
    for role, content in _turns(messages, tpl):
        is_reply = role == tpl.assistant_role
        emit(_encode_with_specials(tokenizer, tpl.turn_prefix.replace("{role}", role),
                                   tpl.specials))
        emit(tokenizer.encode(content), is_reply)
        for i in _encode_with_specials(tokenizer, tpl.turn_suffix, tpl.specials):
            emit([i], is_reply and i in stop)
    if add_generation_prompt:
        emit(_encode_with_specials(tokenizer, tpl.turn_prefix.replace("{role}", tpl.assistant_role),
                                   tpl.specials))
    return ids, mask


def stop_ids(tokenizer, template: str | ChatTemplate | None = None) -> list[int]:
    """Ids that end a reply: eos and the template's end-of-turn token (eos first). Without a
    template (a tokenizer not loaded through `tunix_lite.load`), eos alone."""
    if template is None and getattr(tokenizer, "chat_template", None) is None:
        return [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    tpl = _template(tokenizer, template)
    ids = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    for piece in tpl.stop:
        if (i := tokenizer.piece_to_id(piece)) not in ids:
            ids.append(i)
    return ids


def _template(tokenizer, template: str | ChatTemplate | None) -> ChatTemplate:
    """The template passed, else the tokenizer's own (`tokenizer.chat_template`)."""
    if isinstance(template, ChatTemplate):
        return template
    template = template or getattr(tokenizer, "chat_template", None)
    if template is None:
        raise ValueError("no chat template: pass template= (one of " + ", ".join(TEMPLATES)
                         + ") or load the tokenizer with tunix_lite.load, which sets "
                         "tokenizer.chat_template from the model family")
    if template not in TEMPLATES:
        raise ValueError(f"unknown chat template {template!r}; known: {', '.join(TEMPLATES)}")
    return TEMPLATES[template]


def _turns(messages, tpl: ChatTemplate) -> list[tuple[str, str]]:
    """Validate messages; return (role as the template writes it, content) per turn."""
    if not messages:
        raise ValueError("messages is empty: a chat needs at least one message")
    turns, system = [], None
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {i}: expected a dict with 'role' and 'content', "
                             f"got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"message {i}: unknown role {role!r} "
                             "(expected 'system', 'user' or 'assistant')")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be a str, got {type(content).__name__}")
        if tpl.strip_content:
            content = content.strip()
        if role == "system" and tpl.system_in_first_user:
            if i != 0:
                raise ValueError(f"message {i}: the {tpl.name} template only allows "
                                 "a system message first")
            system = message["content"]  # Gemma's HF template does not trim the system text
            continue
        if system is not None:
            if role != "user":
                raise ValueError(f"message {i}: the system message must be followed "
                                 "by a user message")
            content, system = f"{system}\n\n{content}", None
        turns.append((tpl.assistant_role if role == "assistant" else role, content))
    if system is not None:
        raise ValueError("message 0: the system message must be followed by a user message")
    return turns


def _encode_with_specials(tokenizer, text: str, specials: tuple[str, ...]) -> list[int]:
    """Encode template text, turning each special piece in it into its id."""
    ids = []
    for part in re.split("(" + "|".join(map(re.escape, specials)) + ")", text):
        if part in specials:
            ids.append(tokenizer.piece_to_id(part))
        elif part:
            ids.extend(tokenizer.encode(part))
    return ids
