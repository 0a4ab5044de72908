"""Kits: an architecture end to end, from a tiny transformers checkpoint to the engine's greedy tokens.

:class:`EngineCheckpointKit` extends the model kit
(:class:`~pyagent_model_base.checkpoint_kit.CheckpointKit`: transformers' own model of a tiny config
on random weights, saved as a safetensors folder and as a GGUF file written as llama.cpp's converter
writes the architecture, checked against transformers without the engine) with the engine: the folder
and the GGUF file run by :class:`~pyagent_engine.api.llm.LLM` (the cache manager allocating the
model's declared layout, prompts prefilled in chunks across blocks, sequences batched and preempted),
``pyagent generate``, ``pyagent serve`` and ``pyagent doctor --model``. The hybrid architectures'
checkpoint tests subclass it with the model kit's placeholder vocabulary.

:class:`CheckpointConformance` is the same kit with a real tokenizer, for attention-only
architectures a plain GGUF writer covers: name the class (``impl``, ``spec``), the architecture
(``model_type``, ``gguf_arch``) and a tiny ``config``. Its checkpoint folder carries a byte-level BPE
tokenizer trained with ``tokenizers`` on a few sentences (ChatML special tokens and chat template);
its GGUF file is written with the ``gguf`` package's tensor-name map for ``gguf_arch`` and its
metadata keys (q/k rows permuted as llama.cpp's converter does where ``permute_qk`` says so); the
prompt is a chat prompt. Beside the checks of both kits: the GGUF tokenizer encodes text like
``tokenizer.json``, the GGUF file carries the chat template, ``pyagent bench engine`` runs on the
folder, and a config missing a key and a folder without its tokenizer are errors naming the file and
what is missing.
"""


from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import gguf
import httpx2
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from pyagent_core.errors import ConfigError, ModelFormatError
from pyagent_engine.api.llm import LLM
from pyagent_engine.benchmarks.engine import EngineBenchSettings, run_engine_benchmark
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.kv.block_pool import BlockPool
from pyagent_engine.metrics import prometheus
from pyagent_engine.models.conversion_cache import CACHE_DIR_ENV
from pyagent_engine.models.diagnosis import diagnose_model
from pyagent_engine.models.loader import load_model
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.testing.cli_batch import run_commands
from pyagent_model_base.checkpoint_kit import CheckpointKit

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Paged attention keeps keys and values in blocks.",
    "Grouped-query attention shares each key and value head between several query heads.",
    "A tokenizer turns text into ids; 12 plus 30 is 42, and 7 times 6 is 42 too.",
    "Rotary position embeddings rotate pairs of dimensions by an angle that grows with the position.",
)
TEXTS = ("Why is the sky blue?", "Keys and values, 1234 blocks!", "  spaced\tout\nlines  ")


def train_tokenizer(vocab_size: int = 320) -> BackendTokenizer:
    """A byte-level BPE tokenizer (GPT-2's split and byte alphabet) trained on :data:`CORPUS`,
    with :data:`SPECIAL_TOKENS` as special tokens."""
    tokenizer = BackendTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def gguf_arch_of(name: str) -> gguf.MODEL_ARCH:
    """The ``gguf.MODEL_ARCH`` whose ``general.architecture`` is ``name``."""
    return next(arch for arch, arch_name in gguf.MODEL_ARCH_NAMES.items() if arch_name == name)


def permute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's reordering of q/k rows per head: halves to interleaved pairs."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


def write_gguf(folder: Path, path: Path, arch: str, permute_qk: bool, norm_offset: float = 0.0) -> None:
    """The checkpoint ``folder`` (config, safetensors, tokenizer) as a float32 GGUF file of ``arch``
    (``norm_offset`` added to every ``*norm.weight``, as llama.cpp's Gemma converters add 1)."""
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    weights = load_file(folder / "model.safetensors")
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer = gguf.GGUFWriter(path, arch=arch)
    writer.add_name("tiny " + arch)
    writer.add_block_count(layers)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(rope.get("full_attention", rope).get("rope_theta", config.get("rope_theta", 10000.0)))
    if "sliding_attention" in rope:  # Gemma 3's local layers
        writer.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if config.get("sliding_window"):
        writer.add_sliding_window(config["sliding_window"])
    for key, add in (("attn_logit_softcapping", writer.add_attn_logit_softcapping),
                     ("final_logit_softcapping", writer.add_final_logit_softcapping)):
        if config.get(key):
            add(config[key])
    vocab = sorted(tokenizer["model"]["vocab"].items(), key=lambda item: item[1])
    added = {token["id"]: token["content"] for token in tokenizer["added_tokens"]}
    tokens = [added.get(i, token) for i, (token, _) in enumerate(vocab)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i in added else gguf.TokenType.NORMAL
                            for i in range(len(tokens))])
    merges = tokenizer["model"]["merges"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_chat_template(template)
    name_map = gguf.get_tensor_name_map(gguf_arch_of(arch), layers)
    for name, tensor in weights.items():
        base, _, suffix = name.rpartition(".")
        values = tensor.float().numpy()
        if name.endswith("norm.weight"):
            values = values + np.float32(norm_offset)
        if permute_qk and base.endswith(("q_proj", "k_proj")):
            values = permute_rows(values, heads if base.endswith("q_proj") else kv_heads)
        writer.add_tensor(f"{name_map.get_name(base)}.{suffix}", np.ascontiguousarray(values))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class EngineCheckpointKit(CheckpointKit):
    """:class:`~pyagent_model_base.checkpoint_kit.CheckpointKit` through the engine: the kit's tiny
    checkpoint, folder and GGUF file, run by :class:`~pyagent_engine.api.llm.LLM` with its cache manager
    allocating the model's declared cache layout (blocks and state slots), the mixer backend the
    registry selects and a step budget of :attr:`chunk` tokens, so every prompt is prefilled in chunks
    crossing several chunk and block boundaries.

    The checks, beside the model kit's: transformers' greedy tokens from the folder and from the GGUF
    file; three sequences in one run (their prefill chunks sharing steps with each other's decode steps)
    give each sequence's tokens alone, with a cache large enough for all and with one so small that
    sequences are preempted and recompute (their state rebuilt from their tokens); a model with
    recurrent state refuses prefix caching and speculative decoding with the reason.
    """

    block_size: ClassVar[int] = 4
    max_num_seqs: ClassVar[int] = 4

    def engine(self, model: Path, blocks: int | None = None, **settings: Any) -> LLM:
        """An engine on ``model`` (folder or GGUF file; a GGUF file's conversion cache beside it), float32,
        prefilling :attr:`chunk` tokens a step, :attr:`max_num_seqs` at once; ``blocks``: a cache budget
        of that many blocks beside the state slots (``model`` a folder; default: 0.01 GiB)."""
        gib = 0.01
        if blocks is not None:
            layout = self.impl.cache_layout(self.load_folder(model).config)
            per_block = self.block_size * layout.bytes_per_token(4)
            slots = self.max_num_seqs * layout.bytes_per_sequence()
            gib = (slots + blocks * per_block + per_block // 2) / 2**30
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(CACHE_DIR_ENV, str(model.parent / "cache"))
            return LLM(str(model), dtype="float32", config=EngineConfig(
                block_size=self.block_size, max_num_batched_tokens=self.chunk, max_num_seqs=self.max_num_seqs,
                kv_cache_gib=gib, **settings))

    def engine_tokens(self, llm: LLM, prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], int]:
        """Greedy continuations of ``prompts`` (:attr:`greedy_tokens` each, all submitted at once) and the
        preemptions they went through."""
        params = SamplingParams(max_tokens=self.greedy_tokens, temperature=0.0, ignore_eos=True)
        requests = [llm.engine.add_request(list(prompt), params) for prompt in prompts]
        while llm.engine.has_unfinished():
            for output in llm.engine.step():
                assert output.error is None, output.error
        return [list(r.output_token_ids) for r in requests], sum(r.num_preemptions for r in requests)

    def test_engine_greedy_tokens_from_the_folder(self, checkpoint_dir: Path, prompt_ids: list[int],
                                                  hf_greedy: list[int]) -> None:
        assert self.engine_tokens(self.engine(checkpoint_dir), [prompt_ids])[0] == [hf_greedy]

    def test_engine_greedy_tokens_from_the_gguf_file(self, gguf_path: Path, prompt_ids: list[int],
                                                     hf_greedy: list[int]) -> None:
        assert self.engine_tokens(self.engine(gguf_path), [prompt_ids])[0] == [hf_greedy]

    def test_engine_batch_and_preemption_give_each_sequences_tokens(self, checkpoint_dir: Path,
                                                                   prompt_ids: list[int],
                                                                   hf_greedy: list[int]) -> None:
        """Three sequences in one run, with room for all and with room for 20 blocks (a sequence needs
        ``ceil((prompt + 32) / 4)``, 14 for the model kit's prompt): each gets its tokens alone; the small
        cache preempts them, and they recompute their state from their tokens. A model keeping nothing
        per token pays nothing for blocks, so no budget preempts it: its bookkeeping pool is cut to 20
        blocks instead, the same shortage to the scheduler."""
        prompts = [prompt_ids, prompt_ids[5:] + prompt_ids[:5], prompt_ids[::-1]]
        llm = self.engine(checkpoint_dir)
        alone = [self.engine_tokens(llm, [prompt])[0][0] for prompt in prompts]
        assert alone[0] == hf_greedy
        assert self.engine_tokens(llm, prompts) == (alone, 0)
        if llm.engine.layout.paged:
            small = self.engine(checkpoint_dir, blocks=20)
        else:
            small = self.engine(checkpoint_dir)
            small.engine.kv.pool = BlockPool(20)
        assert small.engine.kv.num_blocks == 20
        tokens, preemptions = self.engine_tokens(small, prompts)
        assert tokens == alone
        assert preemptions > 0

    def test_prefix_cache_hits_keep_the_tokens(self, checkpoint_dir: Path, prompt_ids: list[int],
                                               hf_greedy: list[int]) -> None:
        """A model without state with prefix caching on: the second run of the prompt finds its full blocks
        cached and gives the same tokens (a state model refuses prefix caching: the next test)."""
        if self.spec.recurrent_state:
            pytest.skip(f"{self.spec.name} keeps a recurrent state: prefix caching is refused")
        llm = self.engine(checkpoint_dir, prefix_caching=True)
        params = SamplingParams(max_tokens=self.greedy_tokens, temperature=0.0, ignore_eos=True)
        first, second = (llm.generate([list(prompt_ids)], params)[0] for _ in range(2))
        assert list(first.output_token_ids) == list(second.output_token_ids) == hf_greedy
        assert second.num_cached_tokens >= len(prompt_ids) // self.block_size * self.block_size - self.block_size

    def test_step_stats_and_metrics_count_the_state_slots(self, checkpoint_dir: Path, prompt_ids: list[int]) -> None:
        """Each running request holds one state slot (none for a model without state): the step's
        ``StepStats`` and the ``pyagent:state_slots_usage_perc`` gauge say so, and read 0 once all finished."""
        engine = self.engine(checkpoint_dir).engine
        slots = self.max_num_seqs if self.spec.recurrent_state else 0
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        for prompt in (prompt_ids[:3], prompt_ids[3:6], prompt_ids[6:9]):
            engine.add_request(prompt, params)
        engine.step()
        assert len(engine.scheduler.running) == 3 and engine.info.num_state_slots == slots
        assert (engine.kv.num_free_slots, engine.kv.num_slots) == (slots - 3 * bool(slots), slots)
        assert _gauge(engine.info.engine_id, "state_slots_usage_perc") == (3 / slots if slots else 0.0)
        while engine.has_unfinished():
            engine.step()
        assert engine.kv.num_free_slots == slots and _gauge(engine.info.engine_id, "state_slots_usage_perc") == 0

    @classmethod
    def engine_flags(cls) -> list[str]:
        """The command-line flags of :meth:`engine`'s settings."""
        return ["--dtype", "float32", "--block-size", str(cls.block_size), "--max-num-batched-tokens",
                str(cls.chunk), "--max-num-seqs", str(cls.max_num_seqs), "--kv-cache-gib", "0.01"]

    @pytest.fixture(scope="class")
    @classmethod
    def served(cls, checkpoint_dir: Path) -> Iterator[_Served]:
        """``pyagent serve`` of the folder with :meth:`engine`'s settings, started (not yet answering: a test
        waits for it with :meth:`_Served.health`, so it loads while :meth:`cli_runs` runs)."""
        port = _free_port()
        log = checkpoint_dir.parent / f"serve-{port}.log"
        command = [sys.executable, "-m", "pyagent_core.cli", "serve", "--model", str(checkpoint_dir), "--port",
                   str(port), "--served-model-name", "tiny", "--log-level", "warning", *cls.engine_flags()]
        with log.open("wb") as out:
            server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                      env={**os.environ, CACHE_DIR_ENV: str(checkpoint_dir.parent / "cache")})
        try:
            yield _Served(f"http://127.0.0.1:{port}", server, log)
        finally:
            server.terminate()
            server.wait(60)

    @pytest.fixture(scope="class")
    @classmethod
    def cli_runs(cls, checkpoint_dir: Path) -> dict[str, subprocess.CompletedProcess[str]]:
        """The command lines the kit checks, run in one process (:func:`run_commands`) with :meth:`engine`'s
        settings, by name: ``generate`` (a text prompt, raw, JSON); for a model with mixer layers also
        ``generate --speculative`` and ``serve --speculative`` (both refused)."""
        text = "The quick brown fox jumps over the lazy dog!"
        commands: dict[str, tuple[str, ...]] = {"generate": (
            "generate", text, "--raw", "--json", "--ignore-eos", "--max-tokens", str(cls.greedy_tokens))}
        if cls.impl.mixer_families(cls.folder_config(checkpoint_dir)):
            commands |= {"generate --speculative": ("generate", "hello", "--speculative", "ngram"),
                         "serve --speculative": ("serve", "--speculative", "ngram")}
        model = ("--model", str(checkpoint_dir), *cls.engine_flags())
        results = run_commands([(*args, *model) for args in commands.values()],
                               env={**os.environ, CACHE_DIR_ENV: str(checkpoint_dir.parent / "cache")})
        return dict(zip(commands, results, strict=True))

    def test_pyagent_generate_and_serve_give_the_engines_tokens(
            self, checkpoint_dir: Path, served: _Served, cli_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
        """``pyagent generate`` (a text prompt, raw) and ``pyagent serve`` (``/v1/completions`` with the
        prompt's token ids; ``/health`` counting blocks and state slots) give :meth:`engine`'s greedy tokens."""
        result = cli_runs["generate"]
        assert result.returncode == 0, result.stderr
        record = json.loads(result.stdout)
        llm = self.engine(checkpoint_dir)
        [expected], _ = self.engine_tokens(llm, [record["prompt_token_ids"]])
        assert record["output_token_ids"] == expected
        health = served.health()
        slots = self.max_num_seqs if self.spec.recurrent_state else 0
        assert health["state_slots_total"] == health["state_slots_free"] == slots
        assert health["kv_blocks_total"] == llm.engine.num_blocks
        reply = httpx2.post(f"{served.url}/v1/completions", timeout=120, json={
            "model": "tiny", "prompt": record["prompt_token_ids"], "max_tokens": self.greedy_tokens,
            "temperature": 0, "ignore_eos": True})
        assert reply.status_code == 200, reply.text
        params = SamplingParams(max_tokens=self.greedy_tokens, temperature=0.0, ignore_eos=True)
        [output] = llm.generate([record["prompt_token_ids"]], params)
        assert list(output.output_token_ids) == expected
        assert reply.json()["choices"][0]["text"] == output.text  # the same detokenizer

    def mixes(self, checkpoint_dir: Path) -> bool:
        """Whether the model's forward calls mixer families."""
        return bool(self.impl.mixer_families(self.folder_config(checkpoint_dir)))

    def test_doctor_shows_the_cache_layout_and_what_it_rules_out(self, checkpoint_dir: Path, gguf_path: Path) -> None:
        mixes = self.mixes(checkpoint_dir)
        for model in (checkpoint_dir, gguf_path):
            [row] = [row for row in diagnose_model(str(model)) if row.name == "model caches"]
            assert row.ok and ("recurrent state on" in row.detail) == self.spec.recurrent_state, row.detail
            assert ("prefix caching: off (" in row.detail) == self.spec.recurrent_state, row.detail
            assert ("speculative decoding: off (" in row.detail) == mixes, row.detail

    def test_what_the_layout_rules_out_is_refused_with_the_reason(
            self, checkpoint_dir: Path, cli_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
        """A state model refuses prefix caching; a model with mixer layers (state or MLA) refuses
        speculative decoding, from ``LLM``, ``pyagent generate`` and ``pyagent serve`` (one line, no traceback)."""
        if not self.mixes(checkpoint_dir):
            pytest.skip(f"{self.spec.name} has attention layers only: nothing is ruled out")
        if self.spec.recurrent_state:
            with pytest.raises(ConfigError, match=r"^prefix caching is not supported for the .* architecture: a "
                                                  r"cached prefix's blocks hold keys and values but not the recurrent"):
                self.engine(checkpoint_dir, prefix_caching=True)
        why = "rejecting draft tokens would need" if self.spec.recurrent_state else "its mixer layers cannot verify"
        with pytest.raises(ConfigError, match=f"^speculative decoding is not supported for the .* architecture: {why}"):
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(CACHE_DIR_ENV, str(checkpoint_dir.parent / "cache"))
                LLM(str(checkpoint_dir), dtype="float32", speculative=SpeculativeConfig(proposer="ngram"))
        for command in ("generate", "serve"):
            result = cli_runs[f"{command} --speculative"]
            assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
            assert f"speculative decoding is not supported for the {self.spec.name} architecture: {why}" in \
                result.stderr, result.stderr


class CheckpointConformance(EngineCheckpointKit):
    """An attention-only architecture's tiny checkpoint with a trained tokenizer, end to end (module
    docstring); subclasses set ``impl``, ``spec``, ``model_type``, ``gguf_arch`` and ``config``.

    Attributes:
        gguf_arch: the GGUF ``general.architecture`` the file is written as.
        permute_qk: llama.cpp's converter permutes q/k rows for this architecture (``llama``).
        gguf_norm_offset: what llama.cpp's converter adds to the norm weights (1 for Gemma).
    """

    gguf_arch: ClassVar[str]
    permute_qk: ClassVar[bool] = False
    gguf_norm_offset: ClassVar[float] = 0.0

    @classmethod
    def hf_settings(cls) -> dict[str, Any]:
        """The tiny config with the trained tokenizer's vocabulary and ``<|im_end|>`` as end of sequence."""
        tokenizer = train_tokenizer()
        return {**cls.config, "vocab_size": tokenizer.get_vocab_size(), "eos_token_id": tokenizer.token_to_id(
            "<|im_end|>"), "bos_token_id": None, "pad_token_id": None}

    @classmethod
    def save_tokenizer(cls, folder: Path) -> None:
        """The trained tokenizer (``tokenizer.json``) and its ChatML template (``tokenizer_config.json``)."""
        train_tokenizer().save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML, "eos_token": "<|im_end|>",
             "bos_token": None}))

    @pytest.fixture(scope="class")
    @classmethod
    def gguf_path(cls, checkpoint_dir: Path) -> Path:
        """The same weights, tokenizer and template as a GGUF file."""
        path = checkpoint_dir.parent / f"{cls.model_type}-tiny.gguf"
        write_gguf(checkpoint_dir, path, cls.gguf_arch, cls.permute_qk, cls.gguf_norm_offset)
        return path

    @pytest.fixture(scope="class")
    @classmethod
    def prompt_ids(cls, checkpoint_dir: Path) -> list[int]:
        """A chat prompt rendered with the checkpoint's template and tokenized by pyagent."""
        loaded = load_model(checkpoint_dir)
        assert loaded.chat_template is not None
        text = loaded.chat_template.render([{"role": "user", "content": "Why is the sky blue?"}],
                                           add_generation_prompt=True)
        return loaded.tokenizer.encode(text, add_special_tokens=False)

    def test_gguf_carries_the_chat_template(self, gguf_path: Path) -> None:
        assert load_model(gguf_path, use_cache=False).chat_template is not None

    def test_gguf_tokenizer_encodes_like_the_folders(self, checkpoint_dir: Path, gguf_path: Path) -> None:
        folder, file = load_model(checkpoint_dir).tokenizer, load_model(gguf_path, use_cache=False).tokenizer
        for text in TEXTS:
            assert file.encode(text) == folder.encode(text)

    def test_bench_engine_runs_on_the_folder(self, checkpoint_dir: Path) -> None:
        """``pyagent bench engine --model FOLDER`` measures pyagent and transformers on it (float32, one
        prompt, one concurrency; only the report's shape is checked)."""
        settings = attrs.evolve(EngineBenchSettings.quick(("float32",), model=checkpoint_dir), concurrency=(1,))
        report = run_engine_benchmark(settings)
        assert report["model"] == checkpoint_dir.name and not report["peers"]["llama.cpp"]["available"]
        engines = {row["engine"] for row in report["single_stream"] if row["decode_tok_s"] > 0}
        assert engines == {"pyagent", "transformers"}

    def test_a_missing_config_key_names_the_file_and_key(self, checkpoint_dir: Path,
                                                         tmp_path: Path) -> None:
        folder = tmp_path / "partial"
        shutil.copytree(checkpoint_dir, folder)
        data = json.loads((folder / "config.json").read_text())
        del data["num_hidden_layers"]
        (folder / "config.json").write_text(json.dumps(data))
        with pytest.raises(ModelFormatError, match=f"{folder / 'config.json'} lacks the required key "
                                                   "'num_hidden_layers'"):
            load_model(folder)

    def test_a_missing_tokenizer_names_the_folder_and_file(self, checkpoint_dir: Path, tmp_path: Path) -> None:
        folder = tmp_path / "untokenized"
        shutil.copytree(checkpoint_dir, folder)
        (folder / "tokenizer.json").unlink()
        with pytest.raises(ModelFormatError, match=f"{folder} is not a model checkpoint: it lacks tokenizer.json"):
            load_model(folder)


def _gauge(engine_id: str, name: str) -> float:
    """The value of the engine's ``pyagent:NAME`` gauge in its Prometheus exposition."""
    found = prometheus.exposition(engine_id)
    assert found is not None, "the metrics plugin did not start with the engine"
    for family in text_string_to_metric_families(found[0].decode()):
        for sample in family.samples:
            if sample.name == "pyagent:" + name:
                return float(sample.value)
    raise AssertionError(f"no pyagent:{name} in the exposition")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.frozen
class _Served:
    """A started ``pyagent serve``: its base URL, process and log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def health(self, within: float = 180) -> dict[str, Any]:
        """``/health``'s body once the server answers 200 (its log in the error when it exits first)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"pyagent serve exited with {self.process.returncode}: "
                                     f"{self.log.read_text(errors='replace')}")
            with contextlib.suppress(httpx2.HTTPError):
                answer = httpx2.get(self.url + "/health", timeout=10)
                if answer.status_code == 200:
                    return dict(answer.json())
            time.sleep(0.2)
        raise AssertionError(f"pyagent serve did not answer within {within} s: {self.log.read_text(errors='replace')}")
