"""Seeded block-trace generator: multi-turn chats, agent loops and one-off scans, in any mix.

The Mooncake traces show one service each; an eviction policy meant to be switched on by default
must also hold up on traffic it was not tuned on. This module writes such traffic as a
:class:`~pyagent_engine.kvsim.trace.BlockTrace`, deterministically from a seed (``random.Random``
only), with three kinds of session interleaved:

- **chat**: a conversation under one of ``system_prompts`` shared system prompts, picked with Zipf
  popularity (exponent ``zipf``: a few prompts serve most conversations). Each turn re-sends the
  whole history (system prompt, earlier questions and answers) plus a new question; a conversation
  has a geometric number of turns (mean ``chat_turns``).
- **agent**: a tool-using loop under one of ``agent_prompts`` long agent prompts (Zipf too). Each
  step re-reads the whole context, which grows by a long tool output (a file, a search result,
  ``tool_tokens`` on average) and a short model action; a loop has a geometric number of steps
  (mean ``agent_steps``), so the same long outputs are read again and again within a few requests.
- **scan**: a one-off request (a document to summarise, a batch job) of ``scan_tokens`` on
  average behind a short shared instruction; its blocks are never used again.

``sessions`` are open at once; each request comes from one of them, chosen at random, so a
session's next request arrives after about ``sessions`` others (chats wait longer: ``chat_pace``
of them are idle at a time, as users read and type). When a session ends, a new one of a kind
drawn by ``mix`` (weights of chat, agent, scan) takes its place. Token counts are drawn from
log-normal distributions around their means.

Blocks hold ``block_size`` tokens; a block's id stands for the whole prefix up to it (chained
hashes), so the chains are what a prefix cache sees: a turn reuses every full block of the previous
request of its session, and the previous partial last block, now longer, gets a new id.
:data:`WORKLOADS` names the mixes ``pyagent bench kvcache --generate`` offers.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator

import attrs

from pyagent_engine.kvsim.trace import BlockTrace


@attrs.frozen
class TraceShape:
    """What a generated trace holds; every field has a default, and ``seed`` fixes the outcome."""

    requests: int = 6000
    """Requests in the trace."""
    mix: tuple[float, float, float] = (0.6, 0.25, 0.15)
    """Relative weights of new chat, agent and scan sessions."""
    sessions: int = 48
    """Sessions open at once."""
    block_size: int = 64
    """Tokens per block."""
    system_prompts: int = 40
    """Distinct chat system prompts."""
    agent_prompts: int = 8
    """Distinct agent prompts."""
    zipf: float = 1.1
    """Exponent of the Zipf popularity of system and agent prompts."""
    system_tokens: int = 1200
    """Mean tokens of a chat system prompt."""
    agent_prompt_tokens: int = 3000
    """Mean tokens of an agent prompt."""
    question_tokens: int = 150
    """Mean tokens of a chat question."""
    answer_tokens: int = 300
    """Mean tokens of a chat answer (in the history of the next turn)."""
    chat_turns: float = 4.0
    """Mean turns of a conversation."""
    agent_steps: float = 8.0
    """Mean steps of an agent loop."""
    tool_tokens: int = 1500
    """Mean tokens of a tool output."""
    action_tokens: int = 60
    """Mean tokens of an agent's action (the model's tool call)."""
    scan_tokens: int = 3000
    """Mean tokens of a one-off scan request."""
    scan_prefix_tokens: int = 100
    """Tokens of the instruction every scan shares."""
    chat_pace: float = 0.5
    """Chance that a chat drawn to send its next turn waits instead (users read and type)."""
    seed: int = 0
    """Seed of the ``random.Random`` every draw comes from."""


WORKLOADS: dict[str, TraceShape] = {
    "chat": TraceShape(mix=(0.85, 0.0, 0.15), sessions=400, chat_pace=0.75, seed=1),
    "agent": TraceShape(requests=3000, mix=(0.0, 0.8, 0.2), sessions=150, tool_tokens=800, seed=2),
    "mixed": TraceShape(requests=4000, mix=(0.45, 0.3, 0.25), sessions=300, tool_tokens=800, scan_tokens=5000,
                        seed=3),
}
"""The generated workloads of ``pyagent bench kvcache``: chats with shared system prompts and a
few scans; agent loops re-reading long tool outputs, with scans; and all three with heavier scans."""


class _Generator:
    """Draws sessions and their requests; ids come from one counter so no two contents share one."""

    def __init__(self, shape: TraceShape) -> None:
        self.shape = shape
        self.rng = random.Random(shape.seed)
        self.ids = itertools.count()
        self.system = [self._tokens(shape.system_tokens) for _ in range(shape.system_prompts)]
        self.agent = [self._tokens(shape.agent_prompt_tokens) for _ in range(shape.agent_prompts)]
        self.shared: dict[tuple[str, int], list[int]] = {}
        """Full blocks of each system or agent prompt, made once and shared by its sessions."""
        self.scan_prefix = max(1, shape.scan_prefix_tokens)
        self.scan_prompt = [next(self.ids) for _ in range(self.scan_prefix // shape.block_size)]
        self.system_weights = _zipf_weights(shape.system_prompts, shape.zipf)
        self.agent_weights = _zipf_weights(shape.agent_prompts, shape.zipf)

    def _tokens(self, mean: int) -> int:
        """A log-normal token count with the given mean (sigma 0.6), at least 1."""
        sigma = 0.6
        return max(1, round(self.rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))

    def session(self) -> tuple[str, Iterator[tuple[list[int], int]]]:
        """A new session of a kind drawn by ``mix``: its kind and its requests, each as (block ids,
        prompt tokens)."""
        shape = self.shape
        kind = self.rng.choices(("chat", "agent", "scan"), weights=shape.mix)[0]
        if kind == "scan":
            return kind, self._scan()
        if kind == "agent":
            index = self.rng.choices(range(shape.agent_prompts), cum_weights=self.agent_weights)[0]
            return kind, self._loop(("agent", index), self.agent[index], shape.agent_steps,
                                    shape.tool_tokens, shape.action_tokens)
        index = self.rng.choices(range(shape.system_prompts), cum_weights=self.system_weights)[0]
        return kind, self._loop(("chat", index), self.system[index], shape.chat_turns,
                                shape.question_tokens, shape.answer_tokens)

    def _scan(self) -> Iterator[tuple[list[int], int]]:
        tokens = self.scan_prefix + self._tokens(self.shape.scan_tokens)
        blocks = -(-tokens // self.shape.block_size)
        yield self.scan_prompt + [next(self.ids) for _ in range(blocks - len(self.scan_prompt))], tokens

    def _loop(self, prompt: tuple[str, int], prompt_tokens: int, mean_rounds: float, added_tokens: int,
              reply_tokens: int) -> Iterator[tuple[list[int], int]]:
        """Rounds over a growing context: each adds ``added_tokens`` (a question, a tool output) on
        top of the previous round's reply, and re-sends everything."""
        shared = self.shared.setdefault(prompt, [])
        size = self.shape.block_size
        full = prompt_tokens // size
        while len(shared) < full:
            shared.append(next(self.ids))
        chain = shared[:full]
        tokens = prompt_tokens
        rounds = 1 + _geometric(self.rng, mean_rounds)
        for round_index in range(rounds):
            if round_index:
                tokens += self._tokens(reply_tokens)
            tokens += self._tokens(added_tokens)
            while len(chain) < tokens // size:
                chain.append(next(self.ids))
            partial = [next(self.ids)] if tokens % size else []
            yield chain + partial, tokens


def _zipf_weights(count: int, exponent: float) -> list[float]:
    """Cumulative Zipf weights of ranks 1..count."""
    return list(itertools.accumulate(1.0 / (rank ** exponent) for rank in range(1, count + 1)))


def _geometric(rng: random.Random, mean: float) -> int:
    """A draw from the geometric distribution on 0, 1, 2, ... with the given mean."""
    if mean <= 0:
        return 0
    stop = 1.0 / (1.0 + mean)
    count = 0
    while rng.random() >= stop:
        count += 1
    return count


def generate_trace(shape: TraceShape, name: str = "generated") -> BlockTrace:
    """The trace ``shape`` describes: the same shape (seed included) always gives the same trace."""
    generator = _Generator(shape)
    rng = generator.rng
    open_sessions = [generator.session() for _ in range(shape.sessions)]
    chains: list[list[int]] = []
    lengths: list[int] = []
    while len(chains) < shape.requests:
        slot = rng.randrange(len(open_sessions))
        kind, requests = open_sessions[slot]
        if kind == "chat" and rng.random() < shape.chat_pace:
            continue
        request = next(requests, None)
        if request is None:
            open_sessions[slot] = generator.session()
            continue
        chains.append(request[0])
        lengths.append(request[1])
    return BlockTrace.from_chains(chains, name=name, block_size=shape.block_size, input_lengths=lengths)
