"""Discovery over real installed distributions: good, broken, raising and clashing plugins."""

from __future__ import annotations

import pytest

from pyagent_core.errors import (
    AmbiguousBackendError,
    BackendUnavailableError,
    NoBackendError,
    SpecError,
    UnknownBackendError,
)
from pyagent_core.kinds import EVICTION, SAMPLER
from pyagent_core.registry import STATUS_BLOCKED, STATUS_FAILED, STATUS_OK


def sampler_plugin(name: str, impl: str = "good_impl:Impl", extra: str = "") -> str:
    return f"""
        from pyagent_core import hookimpl, SamplerSpec

        @hookimpl
        def pyagent_register_samplers(register):
            register(SamplerSpec(name={name!r}, impl={impl!r}, summary="test", priority=5))
        {extra}
    """


GOOD_IMPL = """
    class Impl:
        @classmethod
        def check_available(cls):
            return None
"""


@pytest.fixture
def zoo(site):
    """Five distributions: good, import-failing, hook-raising, and two claiming 'dup'."""
    site.add("dist-good", {"good_plugin": sampler_plugin("good"), "good_impl": GOOD_IMPL},
             {"good": "good_plugin"})
    site.add("dist-import-fails", {"bad_import": "import module_that_does_not_exist\n"},
             {"bad-import": "bad_import"})
    site.add("dist-hook-raises", {"bad_hook": """
        from pyagent_core import hookimpl

        @hookimpl
        def pyagent_register_samplers(register):
            raise RuntimeError("registration exploded")
    """}, {"bad-hook": "bad_hook"})
    site.add("dist-dup-a", {"dup_a": sampler_plugin("dup")}, {"dup-a": "dup_a"})
    site.add("dist-dup-b", {"dup_b": sampler_plugin("dup")}, {"dup-b": "dup_b"})
    return site


def test_good_plugin_is_listed_and_selectable(zoo, make_registry):
    registry = make_registry()
    names = [b.name for b in registry.backends("sampler")]
    assert "good" in names
    chosen = registry.select("sampler", "good")
    assert chosen.backend.dist == "dist-good"
    assert chosen.source == "argument"
    assert registry.check(chosen.backend).available


def test_broken_plugins_are_reported_with_reason_and_do_not_break_listing(zoo, make_registry):
    registry = make_registry()
    plugins = {p.name: p for p in registry.plugins()}
    assert plugins["good"].status == STATUS_OK
    assert plugins["bad-import"].status == STATUS_FAILED
    assert "module_that_does_not_exist" in plugins["bad-import"].errors[0]
    assert plugins["bad-hook"].status == STATUS_FAILED
    assert "registration exploded" in plugins["bad-hook"].errors[0]
    problems = "\n".join(registry.problems())
    assert "bad-import" in problems and "bad-hook" in problems
    assert {"good", "dup"} <= {b.name for b in registry.backends("sampler")}


def test_selecting_a_broken_plugin_raises_with_its_reason(zoo, make_registry):
    registry = make_registry()
    with pytest.raises(UnknownBackendError) as info:
        registry.select("sampler", "bad-import")
    message = str(info.value)
    assert "bad-import" in message
    assert "module_that_does_not_exist" in message
    assert "registration exploded" in message
    assert "good" in message  # the valid choices are listed


def test_name_clash_names_both_distributions_and_dist_prefix_resolves(zoo, make_registry):
    registry = make_registry()
    with pytest.raises(AmbiguousBackendError) as info:
        registry.select("sampler", "dup")
    assert "dist-dup-a" in str(info.value) and "dist-dup-b" in str(info.value)
    assert any("dist-dup-a" in p and "dist-dup-b" in p for p in registry.problems())
    assert registry.select("sampler", "dist-dup-b:dup").backend.dist == "dist-dup-b"
    assert registry.select("sampler", "dist_dup_a:dup").backend.dist == "dist-dup-a"


def test_unknown_name_lists_the_choices(zoo, make_registry):
    with pytest.raises(UnknownBackendError, match=r"no sampler backend named 'nope'.*good"):
        make_registry().select("sampler", "nope")


def test_unknown_hook_and_wrong_record_type_are_reported(site, make_registry):
    site.add("dist-typo", {"typo_plugin": """
        from pyagent_core import hookimpl, AttentionSpec

        @hookimpl
        def pyagent_register_sampler(register):
            pass

        @hookimpl
        def pyagent_register_samplers(register):
            register(AttentionSpec(name="wrong", impl="x:Y"))
    """}, {"typo": "typo_plugin"})
    info = {p.name: p for p in make_registry().plugins()}["typo"]
    assert info.status == STATUS_FAILED
    joined = " ".join(info.errors)
    assert "unknown hook 'pyagent_register_sampler'" in joined
    assert "register a SamplerSpec record" in joined


def test_missing_requirement_makes_backend_unavailable_without_import(site, make_registry):
    site.add("dist-needs", {"needs_plugin": """
        from pyagent_core import hookimpl, SamplerSpec

        @hookimpl
        def pyagent_register_samplers(register):
            register(SamplerSpec(name="needs", impl="needs_impl_never_imported:X",
                                 requires=("package-that-is-not-installed>=1",),
                                 install_hint="pip install package-that-is-not-installed"))
            register(SamplerSpec(name="too-new", impl="x:Y", requires=("pluggy>=999",)))
    """}, {"needs": "needs_plugin"})
    registry = make_registry()
    needs = registry.get("sampler", "needs")
    verdict = registry.availability(needs)
    assert not verdict.available
    assert "package-that-is-not-installed>=1" in verdict.reason
    assert "pip install package-that-is-not-installed" in verdict.reason
    assert "is installed" in registry.availability(registry.get("sampler", "too-new")).reason
    with pytest.raises(BackendUnavailableError, match="not installed"):
        registry.select("sampler", "needs")
    import sys

    assert "needs_impl_never_imported" not in sys.modules


def test_deep_check_reports_the_backends_own_failure(site, make_registry):
    site.add("dist-checked", {
        "checked_plugin": sampler_plugin("checked", "checked_impl:Impl"),
        "checked_impl": """
            class Impl:
                @classmethod
                def check_available(cls):
                    raise RuntimeError("needs AVX-1024")
        """,
    }, {"checked": "checked_plugin"})
    registry = make_registry()
    backend = registry.get("sampler", "checked")
    assert registry.availability(backend).available
    verdict = registry.check(backend)
    assert not verdict.available and verdict.checked
    assert "needs AVX-1024" in verdict.reason


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"PYAGENT_PLUGINS": "good"}, {"good"}),
        ({"PYAGENT_PLUGINS": "dist-dup-a,DIST_DUP_B"}, {"dup"}),
        ({"PYAGENT_DISABLE_PLUGINS": "dup-a,dist-dup-b"}, {"good"}),
        ({"PYAGENT_DISABLE_PLUGIN_AUTOLOAD": "1"}, set()),
        ({"PYAGENT_DISABLE_PLUGIN_AUTOLOAD": "true", "PYAGENT_PLUGINS": "good"}, {"good"}),
    ],
)
def test_allow_deny_and_autoload(zoo, make_registry, environ, expected):
    registry = make_registry(environ)
    assert {b.name for b in registry.backends("sampler")} == expected
    blocked = [p for p in registry.plugins() if p.status == STATUS_BLOCKED]
    assert all(p.errors and "PYAGENT_" in p.errors[0] for p in blocked)


def test_blocked_plugins_are_never_imported(zoo, make_registry):
    import sys

    make_registry({"PYAGENT_DISABLE_PLUGINS": "bad-hook"}).plugins()
    assert "bad_hook" not in sys.modules


def test_trace_writes_hook_calls_to_stderr(zoo, make_registry, capsys):
    make_registry({"PYAGENT_TRACE_PLUGINS": "1"}).plugins()
    assert "pyagent_register_samplers" in capsys.readouterr().err


def test_load_plugins_is_idempotent(zoo, make_registry):
    registry = make_registry()
    first = registry.backends("sampler")
    registry.load_plugins()
    assert registry.backends("sampler") == first


def test_an_allow_list_naming_no_installed_plugin_says_so(zoo, make_registry):
    registry = make_registry({"PYAGENT_PLUGINS": "nosuch", "PYAGENT_DISABLE_PLUGINS": "good,typo"})
    with pytest.raises(NoBackendError) as info:
        registry.select("sampler")
    message = str(info.value)
    assert "none is installed" not in message and "installed plugins are blocked" in message
    assert "PYAGENT_PLUGINS names 'nosuch', which is no installed plugin or distribution; installed: " in message
    assert "allow a plugin of this kind in PYAGENT_PLUGINS" in message
    assert {p.split(",")[0] for p in registry.control_problems()} == {
        "PYAGENT_PLUGINS names 'nosuch'", "PYAGENT_DISABLE_PLUGINS names 'typo'"}


def test_load_returns_the_implementation_class_and_refuses_what_is_not_one(site, make_registry):
    site.add("dist-impls", {"impls_plugin": """
        from pyagent_core import hookimpl, EvictionSpec, SamplerSpec

        @hookimpl
        def pyagent_register_eviction_policies(register):
            register(EvictionSpec(name="good", impl="impls_code:Policy"))
            register(EvictionSpec(name="function", impl="impls_code:make_policy"))
            register(EvictionSpec(name="other-kind", impl="impls_code:Selector"))

        @hookimpl
        def pyagent_register_samplers(register):
            register(SamplerSpec(name="selector", impl="impls_code:Selector"))
    """, "impls_code": """
        from pyagent_core.interfaces.eviction import EvictionPolicy
        from pyagent_core.interfaces.sampler import TokenSelector

        class Policy(EvictionPolicy):
            pass

        class Selector(TokenSelector):
            pass

        def make_policy(options, context):
            return Policy(options, context)
    """}, {"impls": "impls_plugin"})
    registry = make_registry()
    assert registry.load(registry.get(EVICTION, "good")).__name__ == "Policy"
    assert registry.load(registry.get(SAMPLER, "selector")).__name__ == "Selector"  # a Sampler, not a LogitsProcessor
    with pytest.raises(SpecError, match=r"eviction backend 'dist-impls:function': impl 'impls_code:make_policy' is "
                                        r"<function make_policy .*not a subclass of pyagent_core.interfaces.eviction"):
        registry.load(registry.get(EVICTION, "function"))
    with pytest.raises(SpecError, match=r"'dist-impls:other-kind'.*not a subclass of .*EvictionPolicy"):
        registry.load(registry.get(EVICTION, "other-kind"))
