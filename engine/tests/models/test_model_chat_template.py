"""Chat templates: the GGUF's template against transformers' apply_chat_template, and the sandbox."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from pyagent_core.errors import ChatTemplateError
from pyagent_engine.models.chat_template import ChatTemplate
from pyagent_engine.models.checkpoint import Checkpoint

CONVERSATIONS = (
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
    [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And times 3? 🤔"},
    ],
    [
        {"role": "system", "content": "Réponds en français."},
        {"role": "user", "content": "Bonjour\nça va ?"},
        {"role": "assistant", "content": "Oui, merci !"},
        {"role": "user", "content": "日本語は？"},
    ],
)


@pytest.fixture(scope="module")
def template(checkpoint: Checkpoint) -> ChatTemplate:
    """The embedded model's chat template."""
    assert checkpoint.chat_template is not None
    return checkpoint.chat_template


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_render_matches_transformers(
    template: ChatTemplate, checkpoint: Checkpoint, hf_tokenizer: Any, messages: list[dict[str, str]]
) -> None:
    """Same prompt text and ids as transformers' apply_chat_template(add_generation_prompt=True)."""
    text = template.render(messages)
    assert text == hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    reference = hf_tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if not isinstance(reference, list):  # transformers 5 returns a BatchEncoding
        reference = reference["input_ids"]
    assert checkpoint.tokenizer.encode(text, add_special_tokens=False) == reference


def test_without_generation_prompt(template: ChatTemplate) -> None:
    """add_generation_prompt=False leaves the assistant header off."""
    assert not template.render(CONVERSATIONS[0], add_generation_prompt=False).endswith("assistant\n")


def test_text_parts_are_joined(template: ChatTemplate) -> None:
    """OpenAI list content of text parts renders like the equivalent string."""
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]}]
    assert template.render(parts) == template.render(CONVERSATIONS[0])


def test_special_token_variables_and_tojson() -> None:
    """bos_token/eos_token, tools and extra variables reach the template; tojson keeps non-ASCII;
    strftime_now formats the current time."""
    source = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}{{ tools|tojson }}{{ x }}"
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    rendered = template.render([{"role": "user", "content": "é"}], tools=[{"name": "café"}], x=1)
    assert rendered == '<s>é</s>[{"name": "café"}]1'
    year = ChatTemplate("{{ strftime_now('%Y') }}").render([{"role": "user", "content": ""}])
    assert year == str(datetime.now().year)


def test_raise_exception_becomes_chat_template_error() -> None:
    """A template's raise_exception(...) surfaces as ChatTemplateError with its message."""
    template = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}")
    with pytest.raises(ChatTemplateError, match="user first"):
        template.render([{"role": "assistant", "content": "hi"}])


def test_sandbox_blocks_attribute_escapes() -> None:
    """The sandbox refuses access to Python internals."""
    template = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError, match="failed to render"):
        template.render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "no messages"),
        (["hello"], "message 0 must be a mapping"),
        ([{"content": "no role"}], "string 'role'"),
        ([{"role": "user", "content": 3}], "'content' must be a string"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}], "only text content parts"),
    ],
)
def test_bad_messages(template: ChatTemplate, messages: list[Any], match: str) -> None:
    """Malformed messages are ChatTemplateError naming the problem."""
    with pytest.raises(ChatTemplateError, match=match):
        template.render(messages)


def test_template_that_does_not_compile() -> None:
    """A syntax error in the template is reported when it is loaded."""
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for %}")
