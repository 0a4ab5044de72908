"""LoRA flags with vLLM's names: ``--lora PATH`` (``generate``, ``chat``: one adapter for the call) and
``--enable-lora``, ``--lora-modules NAME=PATH``, ``--max-loras``, ``--max-lora-rank`` (``serve``, ``bench``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from pyagent_core.errors import LoRAAdapterError

PANEL = "LoRA adapters"

LoRAOpt = Annotated[Path | None, typer.Option(
    "--lora", rich_help_panel=PANEL,
    help="A LoRA adapter (PEFT folder or llama.cpp LoRA GGUF) every prompt of the call runs with.")]
EnableLoRAOpt = Annotated[bool, typer.Option(
    "--enable-lora", rich_help_panel=PANEL,
    help="Serve LoRA adapters (implied by --lora-modules, --max-loras, --max-lora-rank).")]
LoRAModulesOpt = Annotated[list[str] | None, typer.Option(
    "--lora-modules", rich_help_panel=PANEL,
    help='A LoRA adapter to serve: NAME=PATH, or JSON {"name": ..., "path": ...} (repeatable); requests '
         'name it in "model".')]
MaxLoRAsOpt = Annotated[int | None, typer.Option(
    "--max-loras", rich_help_panel=PANEL, help="LoRA adapters loaded at once (the model's slots; default 1).")]
MaxLoRARankOpt = Annotated[int | None, typer.Option(
    "--max-lora-rank", rich_help_panel=PANEL, help="The largest LoRA rank a slot holds (default 16).")]


def parse_lora_modules(values: list[str] | None) -> dict[str, str]:
    """Name -> path of each ``--lora-modules`` value (``NAME=PATH`` or vLLM's JSON form); raises
    :class:`LoRAAdapterError` for a value of neither form or a name given twice."""
    modules: dict[str, str] = {}
    for value in values or ():
        if value.lstrip().startswith("{"):
            try:
                data = json.loads(value)
                name, path = data["name"], data["path"]
            except (ValueError, KeyError, TypeError):
                raise LoRAAdapterError(f"--lora-modules {value!r}: the JSON form needs an object with \"name\" and "
                                       "\"path\" strings") from None
        else:
            name, _, path = value.partition("=")
        if not isinstance(name, str) or not isinstance(path, str) or not name.strip() or not path.strip():
            raise LoRAAdapterError(f"--lora-modules {value!r}: give NAME=PATH (an adapter name and its PEFT folder or "
                                   "LoRA GGUF file)")
        if name in modules:
            raise LoRAAdapterError(f"--lora-modules names {name!r} twice; give each adapter its own name")
        modules[name] = path
    return modules


def lora_settings(enable_lora: bool = False, lora_modules: list[str] | None = None, max_loras: int | None = None,
                  max_lora_rank: int | None = None) -> dict[str, Any]:
    """The ``LLM`` keywords of the LoRA flags (none when no flag is given)."""
    modules = parse_lora_modules(lora_modules)
    if not (enable_lora or modules or max_loras is not None or max_lora_rank is not None):
        return {}
    for flag, value in (("--max-loras", max_loras), ("--max-lora-rank", max_lora_rank)):
        if value is not None and value < 1:
            raise LoRAAdapterError(f"{flag} must be a positive integer, got {value}")
    return {"enable_lora": True, "lora_modules": modules, "max_loras": max_loras, "max_lora_rank": max_lora_rank}


def single_adapter(path: Path | None) -> tuple[dict[str, Any], str | None]:
    """For ``--lora PATH``: the ``LLM`` keywords registering it, and the name prompts use (the file's or folder's)."""
    if path is None:
        return {}, None
    return lora_settings(lora_modules=[f"{path.name}={path}"]), path.name
