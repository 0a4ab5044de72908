"""The prompts file of ``pyagent generate --input``: encodings, a bad line failing alone, ``FILE:LINE`` errors."""

from __future__ import annotations

import codecs
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.errors import RequestError
from pyagent_engine.cli.input_file import check_messages, read_prompt_lines
from pyagent_engine.models.chat_template import ChatTemplate

SMOL_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are helpful<|im_end|>\n' }}{% endif %}"
                 "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                 "{% endfor %}")


def _write(tmp_path, data: bytes):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("name", "make", "message"), [
    ("missing", lambda p: p / "nope.jsonl", "no such file"),
    ("folder", lambda p: p, "is a directory"),
    ("blank", lambda p: _write(p, b"\n  \n"), "holds no prompts"),
    ("bad utf-16", lambda p: _write(p, codecs.BOM_UTF16_LE + b"h\x00\x00\xd8"), "save it as UTF-8"),
])
def test_a_file_that_cannot_be_read_says_why(tmp_path, name, make, message):
    path = make(tmp_path)
    with pytest.raises(RequestError, match=message) as info:
        read_prompt_lines(path)
    assert str(info.value).startswith(str(path))


_BAD_LINES = [
    (b"caf\xe9 au lait", "not UTF-8 (byte 0xe9 at column 4)"),
    (b'{"messages": [{"role": "user"}', "invalid JSON at column"),
    (b'{"messages": [{"role": "user"}]}', "messages[0] (user) has no 'content'"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content: a lone surrogate (\\ud800)"),
    (b'{"prompt": "a\\udc00"}', "prompt: a lone surrogate (\\udc00) at character 1 is not Unicode text"),
    (b'{"messages": [{"content": "hi"}]}', "messages[0] needs a string 'role'"),
    (b'{"messages": [{"role": "user", "content": 3}]}', "messages[0].content must be a string"),
    (b'{"messages": []}', "'messages' must be a non-empty list"),
    (b'{"promt": "hi"}', "unknown key 'promt'"),
    (b'{"prompt": "hi", "messages": []}', "exactly one"),
    (b'{"prompt": "hi", "id": [1]}', "'id' must be a string or an integer"),
    (b"[1, 2]", None),  # not starting with "{": a text prompt
    (b"h\x00i\x00", "holds NUL bytes"),
    (b'{"prompt": "hi", "priority": "high"}', "priority must be an integer (smaller goes first), got 'high'"),
    (b'{"prompt": "hi", "deadline_s": -1}', "a deadline at or before the request's arrival is already past"),
    (b'{"prompt": "hi", "tenant": 3}', "tenant must be a non-empty string or None, got 3"),
]


@pytest.mark.parametrize(("raw", "message"), _BAD_LINES)
def test_a_bad_line_fails_alone_naming_file_and_line(tmp_path, raw, message):
    path = _write(tmp_path, b'{"prompt": "first", "id": "a"}\n' + raw + b'\n\nlast\n')
    lines = read_prompt_lines(path)
    assert [line.line for line in lines] == [1, 2, 4]
    assert lines[0].prompt == "first" and dict(lines[0].ids) == {"id": "a"} and lines[2].prompt == "last"
    if message is None:
        assert lines[1].error is None
    else:
        assert lines[1].prompt is None and lines[1].error.startswith(f"{path}:2: ")
        assert message in lines[1].error


def test_scheduling_fields_are_read_per_line(tmp_path):
    path = _write(tmp_path, b'{"prompt": "a", "priority": -1, "tenant": "t1", "deadline_s": 2.5}\n{"prompt": "b"}\n')
    first, second = read_prompt_lines(path)
    assert dict(first.scheduling) == {"priority": -1, "tenant": "t1", "deadline_s": 2.5}
    assert dict(second.scheduling) == {} and first.error is None


@pytest.mark.parametrize(("raw", "ids"), [
    (b'{"custom_id": "req-7", "messages": [{"role": "user", "content": "Hi"}', {"custom_id": "req-7"}),  # cut short
    (b'{"id": 7, "prompt": "caf\xe9"}', {"id": 7}),  # not UTF-8
    (b'{"id": 8, "prompt": "a" "b"}', {"id": 8}),  # broken after its id
    (b'{"prompt": "a" "id": 9}', {}),  # broken before it: not read
    (b'{"id": true, "prompt": 3}', {}),  # not an id
])
def test_a_line_that_does_not_read_keeps_the_id_it_gives(tmp_path, raw, ids):
    (line,) = read_prompt_lines(_write(tmp_path, raw + b"\n"))
    assert line.error is not None and dict(line.ids) == ids


def test_a_bad_json_line_keeps_its_id(tmp_path):
    path = _write(tmp_path, b'{"custom_id": "req-7", "messages": [{"role": "user"}]}\n')
    (line,) = read_prompt_lines(path)
    assert dict(line.ids) == {"custom_id": "req-7"} and line.error is not None


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32", "utf-16-be"])
def test_a_byte_order_mark_is_read_not_kept(tmp_path, encoding):
    text = '{"prompt": "Ünïcode", "id": 1}\r\nplain line\n'
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    lines = read_prompt_lines(_write(tmp_path, data))
    assert [(line.prompt, dict(line.ids)) for line in lines] == [("Ünïcode", {"id": 1}), ("plain line", {})]


_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1).filter(
    lambda t: t.strip() and not t.lstrip().startswith("{"))
_RECORD = st.one_of(
    _TEXT,
    st.fixed_dictionaries({"prompt": st.text(min_size=1)},
                          optional={"id": st.integers(), "custom_id": st.text()}),
    st.fixed_dictionaries({"messages": st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text()}), min_size=1)},
        optional={"custom_id": st.text()}),
)


@given(records=st.lists(_RECORD, min_size=1, max_size=6),
       encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16"]), ascii_json=st.booleans())
def test_records_read_back_as_written(tmp_path_factory, records, encoding, ascii_json):
    """Whatever the encoding or JSON escaping, each record comes back with its prompt, ids, index and line."""
    text = "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=ascii_json) for r in records)
    path = tmp_path_factory.mktemp("input") / "prompts.jsonl"
    path.write_bytes(text.encode(encoding))
    lines = read_prompt_lines(path)
    assert [line.error for line in lines] == [None] * len(records)
    assert [(line.index, line.line) for line in lines] == [(i, i + 1) for i in range(len(records))]
    for line, record in zip(lines, records, strict=True):
        if isinstance(record, str):
            assert line.prompt == record and not line.ids
        else:
            assert line.prompt == record.get("prompt", record.get("messages"))
            assert dict(line.ids) == {k: record[k] for k in ("id", "custom_id") if k in record}


def test_roles_are_checked_against_the_chat_template(tmp_path):
    path = _write(tmp_path, b'{"messages": [{"role": "usr", "content": "hi"}]}\n'
                            b'{"messages": [{"role": "tool", "content": "4"}, {"role": "user", "content": "hi"}]}\n')
    template = ChatTemplate(SMOL_TEMPLATE)
    assert template.roles == {"system", "user", "assistant", "tool"}
    first, second = check_messages(path, read_prompt_lines(path), template)
    assert first.prompt is None and first.error == (
        f"{path}:1: messages[0].role 'usr' is not a role of this model's chat template; "
        "use one of: assistant, system, tool, user")
    assert second.error is None


def test_a_template_that_names_more_roles_takes_them():
    source = "{% for m in messages %}{% if m.role in ['ipython', 'user'] %}x{% elif m['role'] == 'developer' %}" \
             "y{% endif %}{% endfor %}"
    assert ChatTemplate(source).roles == {"system", "user", "assistant", "tool", "ipython", "developer"}


def test_a_conversation_the_template_rejects_fails_alone(tmp_path):
    path = _write(tmp_path, b'{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]}\n'
                            b'{"messages": [{"role": "user", "content": "hi"}]}\n')
    template = ChatTemplate("{% for m in messages %}{% if loop.index0 % 2 != (m.role == 'assistant') %}"
                            "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
                            "{{ m.content }}{% endfor %}")
    first, second = check_messages(path, read_prompt_lines(path), template)
    assert first.error == (f"{path}:1: the chat template rejected the conversation: "
                           "roles must alternate user/assistant")
    assert second.error is None and second.prompt is not None
