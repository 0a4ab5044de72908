"""The sampler flags table: every flag parses into SamplerSettings, and malformed values fail clearly."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from pyagent_core.errors import OptionError
from pyagent_engine.cli.sampler_flags import SAMPLER_FLAGS, SamplerSettings, parse_sampler_opts, with_sampler_flags


def app_recording(seen: list[SamplerSettings]) -> typer.Typer:
    app = typer.Typer()

    def command(prompt: str, sampler: SamplerSettings | None = None) -> None:
        assert sampler is not None
        seen.append(sampler)

    app.command()(with_sampler_flags(command))
    return app


def test_flags_become_request_params_order_and_options():
    seen: list[SamplerSettings] = []
    result = CliRunner().invoke(app_recording(seen), [
        "hi", "--typical-p", "0.9", "--mirostat", "2", "--dry-sequence-breakers", "\\n",
        "--dry-sequence-breakers", "###", "--logit-bias", "15=-5", "--logit-bias", "42=2.5",
        "--suppress-tokens", "1,2,3", "--samplers", "dry,typical,temperature", "--sampler-opt", "xtc.seed=7",
    ])
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert settings.params == {"typical_p": 0.9, "mirostat": 2, "dry_sequence_breakers": ["\n", "###"],
                               "logit_bias": {15: -5.0, 42: 2.5}, "suppress_tokens": [1, 2, 3]}
    assert settings.order == "dry,typical,temperature"
    assert settings.options == {"xtc": {"seed": "7"}}


@pytest.mark.parametrize(("values", "expected"), [
    (["none"], []), (["\\n", "\\t\\x41\\q"], ["\n", "\tA\\q"]), (['\\"', "*"], ['"', "*"]),
])
def test_dry_sequence_breakers_are_strings_with_llama_cpps_escapes(values, expected):
    seen: list[SamplerSettings] = []
    args = ["hi"] + [arg for value in values for arg in ("--dry-sequence-breakers", value)]
    result = CliRunner().invoke(app_recording(seen), args)
    assert result.exit_code == 0, result.output
    assert seen[0].params == {"dry_sequence_breakers": expected}


@pytest.mark.parametrize("values", [["none", ":"], [""]])
def test_empty_or_mixed_none_breakers_are_refused(values):
    args = ["hi"] + [arg for value in values for arg in ("--dry-sequence-breakers", value)]
    result = CliRunner().invoke(app_recording([]), args)
    assert result.exit_code != 0
    assert isinstance(result.exception, OptionError) and "'none' alone for no breakers" in str(result.exception)


def test_every_flag_is_in_the_help():
    result = CliRunner().invoke(app_recording([]), ["--help"], env={"COLUMNS": "200"})
    for flag in SAMPLER_FLAGS:
        assert flag.flag in result.output
    assert "--samplers" in result.output and "--sampler-opt" in result.output


@pytest.mark.parametrize(("pairs", "message"), [
    (["xtc_seed=7"], "must be NAME.KEY=VALUE"),
    (["xtc.seed"], "is not of the form KEY=VALUE"),
])
def test_malformed_sampler_opts(pairs, message):
    with pytest.raises(OptionError, match=message):
        parse_sampler_opts(pairs)
