"""Selection precedence (argument > env > project > user > priority) and option validation."""

from __future__ import annotations

import pytest

from pyagent_core.config import Settings, write_selection
from pyagent_core.errors import ConfigError, OptionError, UnknownBackendError

PLUGIN = """
    from pyagent_core import hookimpl, AttentionSpec, OptionSpec

    @hookimpl
    def pyagent_register_attention_backends(register):
        for name, priority in (("low", 1), ("mid", 5), ("high", 9), ("env", 0), ("proj", 0), ("usr", 0)):
            register(AttentionSpec(
                name=name, impl="attn_impl:Impl", priority=priority,
                options={
                    "block_size": OptionSpec(type=int, default=16, min=1, max=256, help="tokens per block"),
                    "layout": OptionSpec(type=str, default="nhd", choices=("nhd", "hnd")),
                    "fast": bool,
                },
            ))
        register(AttentionSpec(name="missing", impl="x:Y", priority=100, requires=("no-such-dist",)))
"""


@pytest.fixture
def attn(site, tmp_path):
    site.add("dist-attn", {"attn_plugin": PLUGIN}, {"attn": "attn_plugin"})
    project = tmp_path / "proj"
    project.mkdir()
    return {"project": project / "pyagent.toml", "user": tmp_path / "user" / "config.toml",
            "cwd": project}


def select(make_registry, attn, name=None, env=None, options=None):
    return make_registry(env or {}, cwd=attn["cwd"]).select("attention", name, options)


@pytest.mark.parametrize(
    ("name", "env", "project", "user", "expected", "source"),
    [
        ("low", "env", "proj", "usr", "low", "argument"),
        (None, "env", "proj", "usr", "env", "environment PYAGENT_ATTENTION"),
        (None, None, "proj", "usr", "proj", "project file"),
        (None, None, None, "usr", "usr", "user file"),
        (None, None, None, None, "high", "default (priority 9)"),
    ],
)
def test_precedence(make_registry, attn, name, env, project, user, expected, source):
    if project:
        write_selection(attn["project"], "attention", project, {})
    if user:
        write_selection(attn["user"], "attention", user, {})
    environ = {"PYAGENT_ATTENTION": env} if env else {}
    chosen = select(make_registry, attn, name, environ)
    assert chosen.backend.name == expected
    assert chosen.source.startswith(source)


def test_project_file_is_found_in_a_parent_folder(make_registry, attn):
    write_selection(attn["project"], "attention", "proj", {})
    nested = attn["cwd"] / "a" / "b"
    nested.mkdir(parents=True)
    assert make_registry(cwd=nested).select("attention").backend.name == "proj"


def test_unavailable_highest_priority_is_not_the_default(make_registry, attn):
    registry = make_registry(cwd=attn["cwd"])
    assert registry.default("attention").name == "high"
    assert not registry.availability(registry.get("attention", "missing")).available


def test_options_merge_with_sources(make_registry, attn):
    write_selection(attn["user"], "attention", "mid", {"block_size": 64, "layout": "hnd"})
    write_selection(attn["project"], "attention", "mid", {"block_size": 32})
    chosen = select(make_registry, attn, options={"fast": "yes"})
    assert dict(chosen.options) == {"block_size": 32, "layout": "hnd", "fast": True}
    assert chosen.option_sources["block_size"].startswith("project file")
    assert chosen.option_sources["layout"].startswith("user file")
    assert chosen.option_sources["fast"] == "argument"


def test_cli_string_options_are_converted(make_registry, attn):
    chosen = select(make_registry, attn, "mid", options={"block_size": "128", "fast": "off"})
    assert chosen.options["block_size"] == 128 and chosen.options["fast"] is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"block_size": "sixteen"}, r"option 'block_size' .* expects int, got 'sixteen'"),
        ({"block_size": 1.5}, r"expects int"),
        ({"block_size": 0}, r"must be >= 1"),
        ({"block_size": 512}, r"must be <= 256"),
        ({"layout": "xyz"}, r"must be one of \['nhd', 'hnd'\]"),
        ({"fast": "maybe"}, r"expects bool"),
        ({"blok_size": 8}, r"unknown option 'blok_size' .* valid options: block_size, fast, layout"),
    ],
)
def test_bad_options_raise_naming_key_value_and_fix(make_registry, attn, options, message):
    with pytest.raises(OptionError, match=message):
        select(make_registry, attn, "mid", options=options)


def test_bad_option_in_a_file_names_the_file(make_registry, attn):
    write_selection(attn["project"], "attention", "mid", {"block_size": "big"})
    with pytest.raises(OptionError, match=r"expects int.*from project file .*pyagent.toml"):
        select(make_registry, attn)


def test_malformed_config_file_is_a_config_error(make_registry, attn):
    attn["project"].write_text("[attention\nbackend = 1\n")
    with pytest.raises(ConfigError, match="cannot parse project config"):
        make_registry(cwd=attn["cwd"])
    attn["project"].write_text("[attenshun]\nbackend = 'x'\n")
    with pytest.raises(ConfigError, match="unknown table \\[attenshun\\]"):
        make_registry(cwd=attn["cwd"])
    attn["project"].write_text("[attention]\nblock_size = 3\n")
    with pytest.raises(ConfigError, match="is not allowed"):
        make_registry(cwd=attn["cwd"])


def test_write_selection_keeps_other_tables(attn):
    write_selection(attn["project"], "attention", "mid", {"block_size": 8})
    write_selection(attn["project"], "sampler", "top_k", {})
    write_selection(attn["project"], "attention", "low", {})
    text = attn["project"].read_text()
    assert 'backend = "low"' in text and 'backend = "top_k"' in text and "block_size = 8" in text


@pytest.mark.parametrize("where", ["project", "env"])
def test_an_unknown_backend_from_a_file_or_the_environment_names_where_it_came_from(make_registry, attn, where):
    attn["project"].write_text('[attention]\nbackend = "nope"\n')
    env = {"PYAGENT_ATTENTION": "nope"} if where == "env" else None
    with pytest.raises(UnknownBackendError) as info:
        select(make_registry, attn, env=env)
    expected = f"project file {attn['project']}" if where == "project" else "environment PYAGENT_ATTENTION"
    assert "no attention backend named 'nope'; choose one of: " in str(info.value)
    assert f"(the {expected} selects it; change it there, or run `pyagent use attention NAME`)" in str(info.value)


def test_engine_settings_come_from_the_environment_then_the_project_then_the_user_file(attn):
    attn["project"].write_text('[engine]\nprecision = "exact"\n')
    attn["user"].parent.mkdir()
    attn["user"].write_text('[engine]\nprecision = "int8"\nthreads = 3\n')
    environ = {"PYAGENT_USER_CONFIG": str(attn["user"])}
    settings = Settings.load(environ, cwd=attn["cwd"])
    assert settings.engine_setting("precision", "PYAGENT_PRECISION") == ("exact", f"project file {attn['project']}")
    assert settings.engine_setting("threads", "PYAGENT_THREADS") == (3, f"user file {attn['user']}")
    assert settings.engine_setting("missing", "PYAGENT_MISSING") is None
    chosen = Settings.load({**environ, "PYAGENT_PRECISION": " int8 "}, cwd=attn["cwd"])
    assert chosen.engine_setting("precision", "PYAGENT_PRECISION") == ("int8", "environment PYAGENT_PRECISION")
    write_selection(attn["project"], "attention", "mid", {})  # other tables are kept beside [engine]
    assert 'precision = "exact"' in attn["project"].read_text()


def test_engine_settings_are_plain_values(attn):
    attn["project"].write_text('[engine]\nprecision = ["int8"]\n')
    with pytest.raises(ConfigError, match=r"engine.precision = \['int8'\] must be a string, number or boolean"):
        Settings.load({}, cwd=attn["cwd"])


PARSERS = """
    from pyagent_core import hookimpl, ToolParserSpec

    @hookimpl
    def pyagent_register_tool_parsers(register):
        register(ToolParserSpec(name="aaa", impl="x:Y", priority=9, template_markers=("<aaa>",)))
        register(ToolParserSpec(name="marked", impl="x:Y", template_markers=("<call>",)))
        register(ToolParserSpec(name="zzz", impl="x:Y"))
"""


@pytest.mark.parametrize(
    ("given", "env", "project", "expected", "source"),
    [
        ("zzz", "aaa", "aaa", "zzz", "the flag"),
        ("none", "aaa", None, None, "the flag"),
        (None, "zzz", "aaa", "zzz", "environment PYAGENT_TOOL_PARSER"),
        (None, "none", "aaa", None, "environment PYAGENT_TOOL_PARSER"),  # off: no detection either
        (None, None, "zzz", "zzz", "project file"),
        (None, None, None, "marked", "detected from the chat template"),
    ],
)
def test_a_parser_is_the_flag_then_env_then_files_then_detected(site, make_registry, tmp_path, given, env, project,
                                                                   expected, source):
    from pyagent_core.kinds import TOOL_PARSER
    from pyagent_core.parsing import choose_parser

    site.add("dist-parsers", {"parsers_plugin": PARSERS}, {"parsers": "parsers_plugin"})
    if project:
        write_selection(tmp_path / "pyagent.toml", "tool_parser", project, {})
    registry = make_registry({"PYAGENT_TOOL_PARSER": env} if env else {}, cwd=tmp_path)
    name, where = choose_parser(TOOL_PARSER, given, "<call>{...}</call>", registry)
    assert name == expected and where.startswith(source)


def test_a_kind_without_a_default_selects_nothing_until_asked(site, make_registry):
    from pyagent_core.errors import NothingSelectedError

    site.add("dist-parsers", {"parsers_plugin": PARSERS}, {"parsers": "parsers_plugin"})
    registry = make_registry()
    assert registry.default("tool_parser") is None  # 'aaa' has the highest priority, but parsers have no default
    assert registry.selected("tool_parser") is None
    with pytest.raises(NothingSelectedError, match=r"no tool_parser is selected.*PYAGENT_TOOL_PARSER=NAME"):
        registry.select("tool_parser")
    assert make_registry({"PYAGENT_TOOL_PARSER": "none"}).selected("tool_parser") is None
    assert make_registry({"PYAGENT_TOOL_PARSER": "zzz"}).selected("tool_parser").backend.name == "zzz"
