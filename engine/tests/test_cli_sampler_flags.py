"""The sampler flags, built from the installed samplers' specs: every flag parses into SamplerSettings,
the first-party flags keep their names and help, a third party's parameter gets a flag, and malformed
values fail clearly."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from pyagent_core import OptionSpec, hookimpl
from pyagent_core.errors import OptionError
from pyagent_core.registry import Registry
from pyagent_core.types import SamplerSpec
from pyagent_engine.cli.sampler_flags import SamplerSettings, parse_sampler_opts, with_sampler_flags

# The flags and help texts of the table cli/sampler_flags.py hard-coded before the specs declared them.
FIRST_PARTY_FLAGS = {
    "--min-p": "Drop tokens below min_p times the top probability, in [0, 1] (0: off).",
    "--typical-p": "Locally typical sampling mass, in [0, 1] (1: off).",
    "--epsilon-cutoff": "Epsilon sampling cutoff, in [0, 1] (0: off).",
    "--eta-cutoff": "Eta sampling cutoff, in [0, 1] (0: off).",
    "--top-n-sigma": "Keep logits within n standard deviations of the top, >= 0 (0: off).",
    "--dynatemp-range": "Dynamic temperature in [T - range, T + range], >= 0 (0: off).",
    "--dynatemp-exponent": "Exponent of the entropy in dynamic temperature, >= 0.",
    "--repetition-penalty": "Repetition penalty, > 0 (1: off).",
    "--frequency-penalty": "Frequency penalty, in [-2, 2] (0: off).",
    "--presence-penalty": "Presence penalty, in [-2, 2] (0: off).",
    "--penalty-last-n": "Tokens of context the penalties look at (-1: all).",
    "--dry-multiplier": "DRY penalty scale, >= 0 (0: off).",
    "--dry-base": "DRY penalty growth per repeated token, >= 1.",
    "--dry-allowed-length": "Repeats up to this long are not penalised by DRY, >= 1.",
    "--dry-penalty-last-n": "Tokens of context DRY scans, >= -1 (-1: all, 0: off).",
    "--dry-sequence-breakers": ("DRY sequence breaker string, escapes such as \\n read (repeatable; replaces the "
                                "default '\\n' ':' '\"' '*'; 'none': no breakers)."),
    "--xtc-probability": "Chance per step that XTC removes the top choices, in [0, 1] (0: off).",
    "--xtc-threshold": "Probability from which XTC counts a token as a top choice, in [0, 1].",
    "--mirostat": "Mirostat version: 0 (off), 1 or 2.",
    "--mirostat-tau": "Mirostat target surprise in bits, >= 0.",
    "--mirostat-eta": "Mirostat learning rate, >= 0.",
    "--no-repeat-ngram-size": "Ban repeating any n-gram of this size, >= 0 (0: off).",
    "--logit-bias": "TOKEN_ID=BIAS with BIAS in [-100, 100] (repeatable).",
    "--bad-words-ids": "A banned token id sequence, e.g. 12,7 (repeatable).",
    "--allowed-token-ids": "Only these token ids, e.g. 1,2,3.",
    "--suppress-tokens": "Never these token ids, e.g. 1,2,3.",
    "--min-tokens": "Tokens to generate before end-of-sequence is allowed, >= 0.",
}
SOFTCAP = SamplerSpec(name="tp_softcap", impl="nowhere.impl:Softcap", stage="temperature", position=30,
                      options={"softcap": OptionSpec(type=float, default=0.0, request=True,
                                                     request_help="Soft-cap the logits at this value (0: off)."),
                               "tp_banned": OptionSpec(type=list[int], request=True, help="Banned ids."),
                               "backend": OptionSpec(type=str, default="auto")})


class ThirdParty:
    @hookimpl
    def pyagent_register_samplers(self, register):
        register(SOFTCAP)


def app_recording(seen: list[SamplerSettings], registry: Registry | None = None) -> typer.Typer:
    app = typer.Typer()

    def command(prompt: str, top_k: int = 0, sampler: SamplerSettings | None = None) -> None:
        assert sampler is not None
        seen.append(sampler)

    app.command()(with_sampler_flags(command, registry))
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
    assert isinstance(result.exception, OptionError) and "or 'none' alone for an empty list" in str(result.exception)


def test_the_first_party_flags_keep_their_names_and_help():
    command = typer.main.get_command(app_recording([]))
    helps = {opt: param.help for param in command.params for opt in getattr(param, "opts", [])}
    for flag, text in FIRST_PARTY_FLAGS.items():
        assert helps.get(flag) == text, flag
    assert {"--samplers", "--sampler-opt", "--sampler-param", "--top-k"} <= set(helps)
    assert "--top-p" in helps and "--temperature" in helps  # the reference samplers' declared parameters
    assert list(helps).count("--top-k") == 1  # the command's own flag, not a second one from the spec


def test_a_third_party_parameter_gets_a_flag_and_a_sampler_param_name():
    registry = Registry(plugins=[("tp", ThirdParty())]).load_plugins()
    seen: list[SamplerSettings] = []
    app = app_recording(seen, registry)
    assert CliRunner().invoke(app, ["hi", "--softcap", "30", "--tp-banned", "4,5"]).exit_code == 0
    assert CliRunner().invoke(app, ["hi", "--sampler-param", "softcap=12.5", "--sampler-param",
                                    "logit_bias=15=-5", "--sampler-param", "logit_bias=42=2"]).exit_code == 0
    assert [s.params for s in seen] == [{"softcap": 30.0, "tp_banned": [4, 5]},
                                        {"softcap": 12.5, "logit_bias": {15: -5.0, 42: 2.0}}]
    command = typer.main.get_command(app)
    helps = {opt: param.help for param in command.params for opt in getattr(param, "opts", [])}
    assert helps["--softcap"] == "Soft-cap the logits at this value (0: off)." and "--backend" not in helps


@pytest.mark.parametrize(("args", "message"), [
    (["--sampler-param", "no_such=1"], "no installed sampler declares a parameter 'no_such'"),
    (["--sampler-param", "min_p"], "must be NAME=VALUE"),
    (["--sampler-param", "min_p=x"], "--sampler-param min_p takes"),
    (["--min-p", "0.1", "--sampler-param", "min_p=0.2"], "--min-p and --sampler-param min_p both set min_p"),
])
def test_malformed_sampler_params_fail_clearly(args, message):
    result = CliRunner().invoke(app_recording([]), ["hi", *args])
    assert isinstance(result.exception, OptionError) and message in str(result.exception), result.output


@pytest.mark.parametrize(("pairs", "message"), [
    (["xtc_seed=7"], "must be NAME.KEY=VALUE"),
    (["xtc.seed"], "is not of the form KEY=VALUE"),
])
def test_malformed_sampler_opts(pairs, message):
    with pytest.raises(OptionError, match=message):
        parse_sampler_opts(pairs)
