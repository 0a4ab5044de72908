"""The ``pyagent`` command line, run as a user runs it: a fresh process over the installed plugins."""

from __future__ import annotations

import json

import pytest

from pyagent_core.kinds import KINDS

REFERENCE_SAMPLERS = {"temperature", "top_k", "top_p", "greedy", "multinomial"}


@pytest.fixture
def isolated(tmp_path):
    """Environment and working directory with no config files of the developer's."""
    work = tmp_path / "work"
    work.mkdir()
    return {"env": {"PYAGENT_USER_CONFIG": str(tmp_path / "user.toml")}, "cwd": work}


def test_list_json_has_every_kind_and_the_reference_samplers(cli, isolated):
    result = cli("list", "--json", **isolated)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data["kinds"]) == set(KINDS)
    samplers = {r["name"]: r for r in data["kinds"]["sampler"]}
    assert REFERENCE_SAMPLERS <= set(samplers)
    assert all(samplers[name]["available"] for name in REFERENCE_SAMPLERS)
    assert [name for name, r in samplers.items() if r["default"]] == ["multinomial"]  # a selector, never a processor
    assert {samplers[n]["dist"] for n in REFERENCE_SAMPLERS} == {"pyagent-samplers-reference"}
    for parsers in ("tool_parser", "reasoning_parser"):  # no default: the server uses none unless one is chosen
        assert len(data["kinds"][parsers]) > 1 and not any(r["default"] for r in data["kinds"][parsers])
    # nor do models (all at priority 0): the model file's architecture picks one, not the alphabet
    assert len(data["kinds"]["model"]) > 1 and not any(r["default"] for r in data["kinds"]["model"])


def test_list_model_says_which_engine_features_a_recurrent_state_rules_out(cli, isolated):
    from pyagent_core.interfaces.cache import STATE_LIMITS

    models = {r["name"]: r for r in json.loads(cli("list", "model", "--json", **isolated).stdout)["kinds"]["model"]}
    assert {name for name, r in models.items() if r["limits"]} == {"mamba2", "lfm2", "qwen3next", "granitehybrid"}
    assert models["lfm2"]["limits"] == STATE_LIMITS and models["llama"]["limits"] == {}
    text = " ".join(cli("list", "model", env={**isolated["env"], "COLUMNS": "80"}, cwd=isolated["cwd"]).stdout.split())
    assert "feed-forward. Prefix caching is off: a cached prefix's blocks hold keys and values but not the" in text


def test_config_reports_parsers_as_none_until_one_is_selected(cli, isolated):
    data = json.loads(cli("config", "--json", **isolated).stdout)
    tool = data["selection"]["tool_parser"]
    assert tool["backend"] is None and "detects one from the model's chat template" in tool["source"]
    chosen = json.loads(cli("config", "--json", env={**isolated["env"], "PYAGENT_TOOL_PARSER": "hermes"},
                            cwd=isolated["cwd"]).stdout)["selection"]["tool_parser"]
    assert chosen["backend"] == "hermes" and chosen["source"] == "environment PYAGENT_TOOL_PARSER"


def test_list_check_imports_and_verifies(cli, isolated):
    data = json.loads(cli("list", "sampler", "--check", "--json", **isolated).stdout)
    records = data["kinds"]["sampler"]
    assert records and all(r["checked"] and r["available"] for r in records)


def test_plugins_json_lists_distributions(cli, isolated):
    data = json.loads(cli("plugins", "--json", **isolated).stdout)
    by_dist = {p["dist"]: p for p in data["plugins"]}
    reference = by_dist["pyagent-samplers-reference"]
    assert reference["status"] == "ok"
    assert reference["kinds"] == ["sampler"]
    assert reference["hooks"] == ["pyagent_register_samplers"]
    assert reference["version"]


def test_info_shows_options_and_capabilities(cli, isolated):
    data = json.loads(cli("info", "sampler", "top_k", "--json", **isolated).stdout)
    assert data["dist"] == "pyagent-samplers-reference"
    assert data["options"] and all("type" in o and "default" in o for o in data["options"].values())
    assert data["capabilities"] == {"argmax_invariant": True, "stage": "truncation", "position": 20}
    assert data["options"]["top_k"]["request"] is True and data["options"]["top_k"]["request_help"]
    assert "is a logits processor" in data["select_with"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("info", "sampler", "nope"), "no sampler backend named 'nope'; choose one of:"),
        (("list", "samplr"), "unknown component kind 'samplr'"),
        (("use", "sampler", "multinomial", "--opt", "bogus=1"), "unknown option 'bogus'"),
        (("use", "sampler", "multinomial", "--opt", "noequals"), "is not of the form KEY=VALUE"),
        (("use", "sampler", "top_k"), "sampler 'top_k' (from `pyagent use`) is a logits processor: the sampler "
                                      "selection names the chain's token selector"),
    ],
)
def test_errors_print_one_line_without_traceback(cli, isolated, args, message):
    result = cli(*args, **isolated)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_use_persists_and_config_reports_the_source(cli, isolated):
    greedy = json.loads(cli("info", "sampler", "multinomial", "--json", **isolated).stdout)
    key = next(iter(greedy["options"]))
    result = cli("use", "sampler", "multinomial", "--opt", f"{key}=7", **isolated)
    assert result.returncode == 0, result.stderr
    assert (isolated["cwd"] / "pyagent.toml").read_text().startswith("[sampler]")
    data = json.loads(cli("config", "--json", **isolated).stdout)
    chosen = data["selection"]["sampler"]
    assert chosen["backend"] == "multinomial" and chosen["source"].startswith("project file")
    assert chosen["options"][key]["source"].startswith("project file")
    env_wins = json.loads(cli("config", "--json", env={**isolated["env"], "PYAGENT_SAMPLER": "greedy"},
                              cwd=isolated["cwd"]).stdout)
    assert env_wins["selection"]["sampler"]["source"] == "environment PYAGENT_SAMPLER"


def test_config_reports_a_bad_selection_without_hiding_other_kinds(cli, isolated):
    (isolated["cwd"] / "pyagent.toml").write_text('[attention]\nbackend = "missing"\n')
    data = json.loads(cli("config", "--json", **isolated).stdout)
    assert "no attention backend named 'missing'" in data["selection"]["attention"]["error"]
    assert data["selection"]["sampler"]["backend"] in REFERENCE_SAMPLERS


def test_doctor_reports_libraries_and_the_engines_checks_through_the_hook(cli, isolated):
    data = json.loads(cli("doctor", "--json", **isolated).stdout)
    assert data["libraries"]["torch"] == "2.13.0+cpu" or data["libraries"]["torch"].startswith("2.13.0")
    checks = {check["name"]: check for check in data["checks"]}  # pyagent-engine's pyagent_doctor_checks
    assert isinstance(checks["C kernels"]["ok"], bool) and checks["C kernels"]["detail"]
    assert checks["embedded model"]["ok"] is True and checks["embedded model"]["detail"].endswith(".gguf")


def test_parse_refuses_output_that_is_not_utf8_and_drops_a_bom(cli, isolated, tmp_path):
    latin1, bom = tmp_path / "latin1.txt", tmp_path / "bom.txt"
    latin1.write_bytes("ok\ncafé".encode("latin-1"))
    bom.write_bytes("\ufeffhello".encode())
    result = cli("parse", "--tool-parser", "hermes", "--input", str(latin1), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == f"error: {latin1} is not UTF-8 (byte 0xe9 on line 2); convert it first, e.g. " \
                            "iconv -f latin1 -t utf-8\n"
    result = cli("parse", "--tool-parser", "hermes", "--input", str(bom), "--json", cwd=tmp_path)
    assert result.returncode == 0 and json.loads(result.stdout)["content"] == "hello"
    result = cli("parse", "--tool-parser", "hermes", "--input", str(tmp_path / "none.txt"), cwd=tmp_path)
    assert result.returncode == 2 and "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_a_plugin_allow_list_naming_nothing_installed_is_warned_about(cli, isolated, tmp_path):
    result = cli("list", "sampler", env={"PYAGENT_PLUGINS": "nosuch"}, cwd=tmp_path)
    assert result.returncode == 0 and "none installed" not in result.stdout
    assert "installed plugins are blocked by the plugin control variables" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "PYAGENT_PLUGINS names 'nosuch', which is no installed plugin" in warnings[0]


def test_list_at_80_columns_or_piped_is_one_block_per_backend_in_whole_words(cli, isolated):
    """`make demo` pipes `pyagent list`: 80 columns, where a six-column table splits words mid-way."""
    data = json.loads(cli("list", "--json", **isolated).stdout)
    result = cli("list", env={**isolated["env"], "COLUMNS": "80"}, cwd=isolated["cwd"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    words = result.stdout.split()
    text = " ".join(words)
    backends = [r for records in data["kinds"].values() for r in records]
    for record in backends:
        assert " ".join(record["summary"].split()) in text, record["name"]  # every word whole, in order
        heading = f"{record['name']}{' (default)' if record['default'] else ''}: {record['dist']}"
        assert any(line.startswith("  " + heading) for line in lines), heading
    assert len(lines) <= 4 * len(backends) + 2 * len(data["kinds"])
    wide = cli("list", env={**isolated["env"], "COLUMNS": "160"}, cwd=isolated["cwd"]).stdout
    assert "┃ name" in wide  # a terminal wide enough gets the table
