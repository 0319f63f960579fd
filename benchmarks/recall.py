"""Long-range memory: what the archive and recall keep, what they cost, and how fast.

    python -m benchmarks.recall          # about 15 minutes here; rewrites its section of BENCHMARKS.md
    python -m benchmarks.recall --quick  # a smoke run, printed only
    python -m benchmarks.recall --keep F # also keep the figures in F; --from F re-renders the section from them

- BFCL sessions of 100+ turns made of *different* tasks (conversations taken in turn
  from each tool domain), with the dataset's outputs and with large outputs, and the
  dataset's own short conversations: tokens against the full history, the needed values
  the current task's history holds, and the strict measure (needed values anywhere
  earlier in the whole session), with and without recall, beside a 10-message window;
- tool-free conversations (``benchmarks.facts``): is the answer to a question about a
  fact stated 20 to 100 turns earlier in the composed prompt; lexical recall, and
  semantic recall with all-MiniLM-L6-v2 on Redis 8 with its query engine;
- cost: ``build_messages`` with recall at 1,000 and 10,000 archived turns, for a one-term
  message and for long ordinary ones (up to 24 terms), against the
  load floor (a raw redis-py pipeline of the four reads a load made before the archive),
  and the bytes the server sends per call.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import pickle
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from benchmarks import growth, write_section
from benchmarks.stamps import at_commit
from middleware.core.archive import FAMILIAR, MIN_SIMILARITY, REDUNDANT, RRF_K
from middleware.store.keys import POSTINGS
from middleware.store.load import CANDIDATES, COMMON_TERMS, NEAR_CANDIDATES, NEAREST

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "BENCHMARKS.md"
START, END = "<!-- recall:start -->", "<!-- recall:end -->"


@contextlib.contextmanager
def uncapped() -> Iterator[None]:
    """Recall with whole candidates, for measuring what the index's bounds lose: every id of
    every term kept (no POSTINGS cap on what record.lua keeps, nor on what load.lua reads),
    every common term read (no COMMON_TERMS). Not a setting: the product keeps both bounds,
    which hold a recall's work flat whatever the archive holds."""
    import middleware.store.keys as keys
    import middleware.store.load as load
    import middleware.store.record as record

    bounds = [(vars(module), "POSTINGS", 1 << 40) for module in (keys, load, record)] + [(vars(load), "COMMON_TERMS", 1 << 20)]
    kept = [names[name] for names, name, _ in bounds]
    for names, name, value in bounds:
        names[name] = value
    try:
        yield
    finally:
        for (names, name, _), value in zip(bounds, kept, strict=True):
            names[name] = value


def run_bfcl(quick: bool, tick: Callable[[int], None]) -> dict[str, Any]:
    from benchmarks.dataset import LONG_OUTPUTS, load, mixed_chains
    from benchmarks.savings import FullHistory, LastK, Middleware, replay, summary_rows

    limit = 40 if quick else None
    scopes = {
        "mixed": mixed_chains(load(limit=limit), 30 if quick else 100),
        "mixed_long": mixed_chains(load(limit=limit, category=LONG_OUTPUTS), 30 if quick else 100),
        "single": [[c] for c in load(limit=limit)],
    }
    out: dict[str, Any] = {}
    for scope, sessions in scopes.items():
        strategies = [
            FullHistory(), LastK(),
            Middleware(auto=True, name="recall_off", label="middleware, memory.recall_tokens 0 (no recall, no keys set earlier)",
                       memory={"recall_tokens": 0}),
            Middleware(auto=True, name="no_earlier", label="middleware, recall alone (context.earlier_keys 0)", earlier_keys=0),
            Middleware(auto=True, name="recall_on", label="middleware, keys set earlier and recall (default)"),
            Middleware(auto=True, name="all_earlier", label="middleware, default with context.earlier_keys 36", earlier_keys=36),
        ]  # fmt: skip
        results = replay(sessions, strategies, progress=tick)
        whole = None
        if scope != "single":  # the default with whole candidates (``uncapped``)
            with uncapped():
                whole = summary_rows(replay(sessions, [FullHistory(), Middleware(auto=True, name="whole", label="")],
                                            progress=tick))[1]  # fmt: skip
        out[scope] = {
            "whole": whole,
            "sessions": len(sessions),
            "turns": sorted(sum(len(c.turns) for c in s) for s in sessions),
            "rows": summary_rows(results),
            "misses": {name: dict(results[name].strict_misses) for name in ("recall_off", "recall_on")},
            "reach": reach(sessions),
        }
    return out


def run_long(quick: bool, tick: Callable[[int], None]) -> dict[str, Any]:
    """Long conversations of one tool domain with large tool outputs (section 1.2's
    sessions: ``BFCL_v4_multi_turn_long_context`` played back to back), the full history
    against the default: the needed values kept, at what share of the tokens."""
    from benchmarks.dataset import LONG_OUTPUTS, chains, load
    from benchmarks.savings import FullHistory, Middleware, replay, summary_rows

    sessions = chains(load(limit=40 if quick else None, category=LONG_OUTPUTS), min_turns=30 if quick else 100)
    strategies = [
        FullHistory(),
        Middleware(auto=True, name="recall_on", label="middleware, keys set earlier and recall (default)"),
    ]
    return {
        "sessions": len(sessions),
        "turns": sorted(sum(len(c.turns) for c in s) for s in sessions),
        "rows": summary_rows(replay(sessions, strategies, progress=tick)),
    }


def reach(sessions: list[list[Any]]) -> dict[str, float]:
    """How far recall keyed on words can go, whatever its budget: of the needed values some
    earlier message holds (the strict measure's), the share held by an earlier message that
    shares a word (an index term) with the current message, or with the current message or
    the last exchange; and the share of the history's tokens those messages make up. Beside
    them, a ledger of every distinct value earlier tool calls used, one per line: the share
    of those values it holds, and its tokens as a share of the history's."""
    from benchmarks.savings import _values, bench_config, needed_values, prompt_text, turn_messages
    from middleware.core.lexical import terms as terms_of
    from middleware.session.standalone import composer_for

    count = composer_for(bench_config(auto=True)).tokenizer.count
    needed = by_message = by_exchange = by_ledger = 0
    history_tokens = exchange_tokens = ledger_tokens = 0
    for session in sessions:
        history: list[tuple[frozenset[str], str, int]] = []  # an earlier message: its terms, text, tokens
        last: frozenset[str] = frozenset()
        ledger: dict[str, int] = {}  # every value an earlier call used: its tokens, with its line's end
        for conversation in session:
            for turn in conversation.turns:
                asked = frozenset(terms_of(turn.user))
                wider = asked | last
                held, listed = "\n".join(text for _, text, _ in history), "\n".join(ledger)
                for value in needed_values(turn):
                    if value in held:
                        needed += 1
                        by_message += any(value in text and asked & terms for terms, text, _ in history)
                        by_exchange += any(value in text and wider & terms for terms, text, _ in history)
                        by_ledger += value in listed
                history_tokens += sum(tokens for _, _, tokens in history)
                exchange_tokens += sum(tokens for terms, _, tokens in history if wider & terms)
                ledger_tokens += sum(ledger.values())
                texts = [prompt_text([message]) for message in turn_messages(turn, 0)]
                history += [(frozenset(terms_of(text)), text, count(text)) for text in texts]
                last = frozenset(terms_of(f"{turn.user} {turn.reply}"))
                for call in turn.calls:
                    for value in _values(call.arguments):
                        ledger.setdefault(value, count(value) + 1)
    return {"needed": needed, "by_message": by_message / needed, "by_exchange": by_exchange / needed,
            "exchange_tokens": exchange_tokens / history_tokens, "by_ledger": by_ledger / needed,
            "ledger_tokens": ledger_tokens / history_tokens}  # fmt: skip


def run_facts(quick: bool, tick: Callable[[int], None]) -> dict[str, Any]:
    from benchmarks.embeddings import register
    from benchmarks.facts import conversations, measure, rows, word_reach
    from benchmarks.overhead import server
    from middleware import Config

    logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    count = 6 if quick else 40
    sets, heldout, unseen = (conversations(count, wording=wording) for wording in ("first", "heldout", "unseen"))
    with server() as node:
        config = Config().with_overrides(usage_log={"path": None}, store={"url": node.url})
        variants: dict[str, dict[str, Any]] = {
            "middleware, recall off": {"recall_tokens": 0},
            "middleware, lexical recall (default)": {},
        }
        semantic = "search" in node.modules
        if semantic:
            variants["middleware, semantic recall (all-MiniLM-L6-v2, Redis 8 vector index)"] = {
                "recall": "semantic",
                "embedding_model": register(),
            }
            # The same model as the product runs it offline: an int8 ONNX file, no PyTorch.
            variants[LOCAL_ROW] = {"recall": "semantic", "embedding_model": "local/all-MiniLM-L6-v2"}
        results = rows(measure(sets, config, variants, progress=tick))
        other = rows(measure(heldout, config, variants, progress=tick))
        frozen = rows(measure(unseen, config, variants, progress=tick))
        whole = {}  # the default lexical recall with whole candidates (``uncapped``), per set
        with uncapped():
            for name, conversations_of in (("first", sets), ("heldout", heldout), ("unseen", unseen)):
                whole[name] = rows(measure(conversations_of, config, {"whole": {}}, progress=tick))[-1]
        reach = {"first": word_reach(sets), "heldout": word_reach(heldout), "unseen": word_reach(unseen)}
        return {"whole": whole, "reach": reach, "rows": results, "conversations": len(sets), "turns": sorted(len(c.turns) for c in sets),
                "semantic": semantic, "server": node.version,
                "heldout": {"rows": other, "turns": sorted(len(c.turns) for c in heldout)},
                "unseen": {"rows": frozen, "turns": sorted(len(c.turns) for c in unseen)}}  # fmt: skip


class _Chatty:
    """A session of the tool-free conversations' turns (``benchmarks.facts``), built with
    their long ordinary messages: each asks the archive with up to 24 terms, where the
    overhead workload's "check current node" asks with one."""

    def __init__(self, url: str, archived: int, recall: bool) -> None:
        from benchmarks.facts import conversations
        from middleware import Config, SessionManager

        memory: dict[str, Any] = {"archive_turns": archived} | ({} if recall else {"recall_tokens": 0})
        self.config = Config().with_overrides(usage_log={"path": None}, store={"url": url}, memory=memory)
        self.mgr = SessionManager(self.config)
        self.session = "chatty"
        turns = [turn for conversation in conversations(200) for turn in conversation.turns]
        self.turns, self.asked = turns, [turn.user for turn in turns[-200:]]
        self.calls = 0

    def fill(self, turns: int) -> None:
        for number in range(turns):
            turn = self.turns[number % (len(self.turns) - len(self.asked))]
            self.mgr.record_turn(self.session, user=turn.user, assistant=turn.reply)

    def build(self) -> Any:
        self.calls += 1
        return self.mgr.build_messages(self.session, self.asked[self.calls % len(self.asked)])

    def close(self) -> None:
        self.mgr.close()


WORKLOADS = {
    "short": '"check current node" on repeated turns (1 term)',
    "long": "long ordinary messages on chatty turns (24 terms)",
}


def run_cost(quick: bool, tick: Callable[[int], None]) -> dict[str, Any]:
    import benchmarks.overhead as overhead
    from middleware import SessionManager

    out: dict[str, Any] = {"rows": []}
    with overhead.server() as node:
        admin = redis.Redis(port=node.port)
        for workload in WORKLOADS:
            for archived in (1_000,) if quick else (1_000, 10_000):
                ours: Any
                off: Any
                if workload == "short":
                    ours = overhead.Middleware(node.url)
                    ours.config = ours.config.with_overrides(memory={"archive_turns": archived})
                    ours.mgr.close()
                    ours.mgr = SessionManager(ours.config)
                    ours.fill(archived)
                    # The same session read with recall off: what composing costs before any scoring.
                    off = overhead.Middleware(node.url)
                    off.mgr.close()
                    off.config = ours.config.with_overrides(memory={"recall_tokens": 0})
                    off.mgr, off.session = SessionManager(off.config), ours.session
                else:
                    ours, off = _Chatty(node.url, archived, True), _Chatty(node.url, archived, False)
                    ours.session = off.session = f"chatty-{archived}"
                    ours.fill(archived)
                floor = overhead.Floor(node.url, ours)
                builds, floors, offs, sent = [], [], [], []
                admin.config_resetstat()  # the script's own time on the server: only the build with recall runs it
                for repeat in range(100 if quick else 600):
                    # The three run in turn, in an order that rotates, so none always runs on warmer caches.
                    for which in [(0, 1, 2), (1, 2, 0), (2, 0, 1)][repeat % 3]:
                        if which == 0:
                            floors.append(overhead._timed(floor.build))
                        elif which == 1:
                            before = admin.info("stats")["total_net_output_bytes"]
                            builds.append(overhead._timed(ours.build))
                            sent.append(admin.info("stats")["total_net_output_bytes"] - before)
                        else:
                            offs.append(overhead._timed(off.build))
                    tick(1)
                ratios = sorted(b / f for b, f in zip(builds, floors, strict=True))
                off_ratios = sorted(b / f for b, f in zip(offs, floors, strict=True))
                script = admin.info("commandstats").get("cmdstat_evalsha", {}).get("usec_per_call", 0.0)
                split = _script_split(admin, ours, 100 if quick else 600) if archived == (1_000 if quick else 10_000) else {}
                out["rows"].append({
                    "workload": workload, "archived": archived, "build_p50": statistics.median(builds),
                    "floor_p50": statistics.median(floors), "ratio": ratios[len(ratios) // 2], "bytes": statistics.median(sent),
                    "commands": overhead.per_operation(admin, ours.build)[0],
                    "off_p50": statistics.median(offs), "off_ratio": off_ratios[len(off_ratios) // 2],
                    "script_us": script, "split": split,
                })  # fmt: skip
                ours.close()
                off.close()
                floor.close()
    return out


# The load script cut short after each of its parts, to time them on the server: the four
# reads alone, then the query's index entries read, then every piece scored, then (the whole
# script) the chosen pieces read and sent. Each is cut before the part load.lua marks next.
_PARTS = {"reads": "entries", "entries": "scoring", "scoring": "chosen"}


def _script_split(admin: redis.Redis, ours: Any, calls: int) -> dict[str, float]:
    """The load script's server time per call (µs) up to the end of each part, replaying the
    scripts ``calls`` builds of ``ours`` sent."""
    from middleware.store.load import LOAD, load_script_until

    store, sent = ours.mgr.store, []
    real = store.send

    def capture(batch: Any) -> Any:  # the store sends a script itself, not through client.evalsha
        sent.extend(command[2:] for command in batch.commands if command[0] == "evalsha")
        return real(batch)

    store.send = capture
    try:
        for _ in range(calls):
            ours.build()
    finally:
        del store.send
    scripts = {name: load_script_until(following) for name, following in _PARTS.items()}
    out = {}
    for name, script in (*scripts.items(), ("whole", LOAD.text)):
        sha = admin.script_load(script)
        admin.config_resetstat()
        for args in sent:
            admin.evalsha(sha, *args)
        out[name] = admin.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
    if "search" in {m[b"name"].decode() for m in admin.module_list()}:
        out |= _native(admin, sent)
    return out


_NATIVE = "bench-native"  # the full-text index of the native comparison, and its keys' prefix


def _native(admin: Any, sent: Sequence[tuple[Any, ...]]) -> dict[str, float]:
    """The same queries through the server's own full-text search (FT.SEARCH, BM25) on an
    index of the session's archived pieces (each piece's terms as a TEXT field, the ones
    recall's index holds, unstemmed, no stop words; its turn as a NUMERIC field), asked as
    the load script asks: the current message's terms select, the recent window's rank
    (optional, at their weight), within the turns out of the recent window, as many pieces
    sent back with their records; then, as the script does, the recent window's own turns
    (their calls and results). The server's time per load (µs: both searches). The index holds this
    one session; a deployment's holds every session's pieces, which only adds to its work."""
    from middleware.core.lexical import terms
    from middleware.store.load import LoadArguments

    numkeys = int(sent[0][0])
    keys, argv = sent[0][1 : 1 + numkeys], sent[0][1 + numkeys :]
    arc, meta = keys[4], keys[3]
    arguments = dict(zip((f.name for f in dataclasses.fields(LoadArguments)), argv, strict=False))
    turns = int(admin.hget(meta, "turns") or 0)
    low, high = turns - int(arguments["archive_turns"]) + 1, turns - int(arguments["recent_turns"])
    wanted = int(arguments["candidates"])
    with contextlib.suppress(redis.ResponseError):
        admin.execute_command("FT.DROPINDEX", _NATIVE, "DD")
    admin.execute_command("FT.CREATE", _NATIVE, "ON", "HASH", "PREFIX", "1", f"{_NATIVE}:", "STOPWORDS", "0",
                          "SCHEMA", "turn", "NUMERIC", "w", "TEXT", "NOSTEM", "rec", "TEXT", "NOINDEX")  # fmt: skip
    pipe = admin.pipeline(transaction=False)
    for piece, record in admin.hgetall(arc).items():
        parts = record.split(b"\t")
        if len(parts) >= 4:
            found_by = " ".join(terms(parts[3].decode()))  # what recall's index files the piece under
            pipe.hset(f"{_NATIVE}:{piece.decode()}", mapping={"turn": piece.split(b".")[0], "w": found_by, "rec": record})
    pipe.execute()
    while _info(admin.execute_command("FT.INFO", _NATIVE)).get(b"indexing") not in (0, b"0"):
        time.sleep(0.05)

    def query(text: str, low: int, high: int) -> str:
        pairs = text.split()
        own = [_escaped(t) for t, w in zip(pairs[::2], pairs[1::2], strict=True) if float(w) >= 1]
        ranked = "".join(f" ~(@w:{_escaped(t)} => {{$weight: {w};}})"
                         for t, w in zip(pairs[::2], pairs[1::2], strict=True) if float(w) < 1)  # fmt: skip
        return f"@turn:[{low} {high}] @w:({'|'.join(own)}){ranked}" if own else ""

    def search(text: str) -> Any:
        return admin.execute_command("FT.SEARCH", _NATIVE, text, "SCORER", "BM25STD", "RETURN", "1", "rec",
                                     "LIMIT", "0", str(wanted), "DIALECT", "2")  # fmt: skip

    texts = [_text(args[1 + numkeys + 4]) for args in sent]
    asked = [text for text in texts if query(text, low, high)]  # the script selects nothing else
    admin.config_resetstat()
    for text in asked:
        search(query(text, low, high))
        search(query(text, high + 1, turns))
    stats = admin.info("commandstats")
    per_call = next(v["usec_per_call"] for k, v in stats.items() if k.lower() == "cmdstat_ft.search")
    native = 2 * per_call  # two searches a load
    admin.execute_command("FT.DROPINDEX", _NATIVE, "DD")
    return {"native": native}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _info(reply: Any) -> dict[Any, Any]:
    """FT.INFO's reply as a dict, from a RESP2 flat list or a RESP3 map."""
    return reply if isinstance(reply, dict) else {reply[i]: reply[i + 1] for i in range(0, len(reply) - 1, 2)}


def _escaped(term: str) -> str:
    """A term as the query syntax takes it: every character but a letter or digit escaped."""
    return "".join(c if c.isalnum() else f"\\{c}" for c in term)


def run(quick: bool, progress: Callable[[str, int], None] = lambda stage, n: None) -> dict[str, Any]:
    return {
        "bfcl": run_bfcl(quick, lambda n: progress("BFCL replay", n)),
        "long": run_long(quick, lambda n: progress("long conversations", n)),
        "facts": run_facts(quick, lambda n: progress("tool-free conversations", n)),
        "cost": run_cost(quick, lambda n: progress("build cost", n)),
    }


def _pct(value: float, line: float | None = None) -> str:
    """A share as "92.3%", with more decimals where one would round it onto the target
    ``line`` it misses (96.96% beside "not met" must not read "97.0%")."""
    places = 1
    while line is not None and places < 6 and value < line and round(value * 100, places) >= round(line * 100, 6):
        places += 1
    return f"{value * 100:.{places}f}%"


def _fewer(reduction: float, line: float) -> str:
    """A token saving as "−92.3%", with more decimals where one would round it onto the
    target ``line`` it misses (−89.96% beside "not met" must not read "−90.0%")."""
    return f"−{_pct(reduction, line)}"


@dataclasses.dataclass(frozen=True)
class Goal:
    """A target: a ``share`` (of values kept, or questions answered) at a token ``saving``
    against the full history, both at least. Its cells and its verdict read the same lines."""

    share: float
    saving: float

    def met(self, share: float, saving: float) -> bool:
        return share >= self.share and saving >= self.saving

    def cells(self, share: float, saving: float) -> tuple[str, str]:
        return _pct(share, self.share), _fewer(saving, self.saving)


# The targets of section 5.1, each read by its measured cells and its verdict alike.
MIXED = Goal(0.97, 0.94)  # sessions of 100+ turns of different tasks: strict survival
MIXED_LONG = Goal(0.95, 0.99)  # the same with large outputs
FACTS = Goal(0.90, 0.95)  # tool-free conversations, the frozen unseen wordings: answers in the prompt
LONG_OUTPUTS = Goal(0.92, 0.95)  # long conversations with large tool outputs: needed values kept


def _strict(row: dict[str, Any], goal: Goal) -> str:
    """The measured cells and the verdict of a strict-survival target."""
    strict, fewer = goal.cells(row["strict"], row["reduction"])
    tokens = "tokens met" if row["reduction"] >= goal.saving else "tokens not met"
    survival = "survival met" if row["strict"] >= goal.share else "survival not (see 5.3)"
    return f"{strict} strict, {fewer} tokens | {tokens}; {survival}"


def _saved(row: dict[str, Any]) -> str:
    return "—" if row["strategy"] == "full history" else f"−{row['reduction'] * 100:.1f}%"


def _bfcl_table(scope: dict[str, Any]) -> list[str]:
    lines = [
        "| strategy | tokens, all turns | vs full history | needed values kept (this task's history) | strict: kept of those anywhere earlier | of which held only by another task's turns |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in scope["rows"]:
        reduction = "—" if row["name"] == "full" else f"−{row['reduction'] * 100:.1f}%"
        lines.append(f"| {row['strategy']} | {row['total_tokens']:,} | {reduction} | {_pct(row['kept_of_full'])} | "
                     f"{_pct(row['strict'])} (of {row['strict_needed']:,}) | {_pct(row['elsewhere'])} (of {row['elsewhere_needed']:,}) |")  # fmt: skip
    return lines


def _facts_table(rows: list[dict[str, Any]]) -> list[str]:
    return [
        "| strategy | tokens, all turns | vs full history | answer in the prompt | in the prompt or a candidate | mean tokens at turn 20 | at turn 100 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['strategy']} | {r['tokens']:,} | {_saved(r)} | {_pct(r['answered'])} of {r['questions']} | {_reached(r)} | {r['turn20']:,.0f} | {r['turn100']:,.0f} |"
            for r in rows
        ),
    ]


def _reached(row: dict[str, Any]) -> str:
    """The candidate ceiling: the share of questions whose answer the prompt held or the
    store sent back to be ranked (the same as answered where nothing is recalled)."""
    return _pct(row["reached"]) if row["strategy"].startswith("middleware") and "recall off" not in row["strategy"] else "—"


def _recall_rows(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A set's lexical (default) and semantic recall rows (None when the server has no vector index)."""
    by = {row["strategy"]: row for row in rows}
    semantic = next((row for name, row in by.items() if name.startswith("middleware, semantic")), None)
    return by["middleware, lexical recall (default)"], semantic


def _figures(rows: list[dict[str, Any]]) -> str:
    lexical, semantic = _recall_rows(rows)
    return f"lexical {_pct(lexical['answered'])}" + (f", semantic {_pct(semantic['answered'])}" if semantic else "")


def _facts_verdict(lexical: dict[str, Any], semantic: dict[str, Any] | None) -> str:
    """The tool-free target (``FACTS``), checked for each recall."""
    met = [name for name, row in (("lexical", lexical), ("semantic", semantic))
           if row is not None and FACTS.met(row["answered"], row["reduction"])]  # fmt: skip
    return f"met ({' and '.join(met)})" if met else "not met"


def _set_rows(facts: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each wording set's rows of the tool-free conversations, by the name the report gives it."""
    return {"unseen": facts["unseen"]["rows"], "first": facts["rows"], "held-out": facts["heldout"]["rows"]}


# Recall's targets on the tool-free conversations: the share of questions answered, at ≥90%
# fewer tokens than the full history, for each recall and set (the semantic row fuses the
# ranking by meaning with the lexical one).
FACT_GOALS = (
    ("lexical on the unseen wordings", "unseen", "lexical", 0.60),
    ("fused on the unseen wordings", "unseen", "semantic", 0.80),
    ("fused on the first set", "first", "semantic", 0.90),
)
FACT_TOKENS = 0.90


def _fact_goals(facts: dict[str, Any]) -> str:
    """The measured cells and the verdict of the row of ``FACT_GOALS``, computed from the run."""
    sets = {"unseen": facts["unseen"]["rows"], "first": facts["rows"]}  # the sets the targets name
    measured, met, missed = [], [], []
    for label, key, kind, goal in FACT_GOALS:
        row = dict(zip(("lexical", "semantic"), _recall_rows(sets[key]), strict=True))[kind]
        if row is None:
            measured.append(f"{label}: not measured (no embedding model)")
            missed.append(label)
            continue
        target = Goal(goal, FACT_TOKENS)
        measured.append("{} {} at {}".format(label, *target.cells(row["answered"], row["reduction"])))
        (met if target.met(row["answered"], row["reduction"]) else missed).append(label)
    verdict = "; ".join(f"{word}: {' and '.join(labels)}" for word, labels in (("met", met), ("not met", missed)) if labels)
    reach = facts.get("reach")
    if reach and reach["unseen"] < FACT_GOALS[0][3]:
        verdict += (
            f"; lexical recall cannot meet its part on these wordings: {_pct(reach['unseen'])} of the unseen questions share "
            "a word with the statement that told the answer"
        )
    return f"{'; '.join(measured)} | {verdict} (see 5.4) |"


def _long_outputs(long: dict[str, Any] | None) -> list[str]:
    """The target row of long conversations with large tool outputs (``run_long``)."""
    if not long:
        return []
    row = next(r for r in long["rows"] if r["name"] == "recall_on")
    kept, fewer = LONG_OUTPUTS.cells(row["kept_of_full"], row["reduction"])
    met = LONG_OUTPUTS.met(row["kept_of_full"], row["reduction"])
    return [
        f"| long conversations of one tool domain with large tool outputs ({long['sessions']} sessions of {long['turns'][0]}–{long['turns'][-1]} turns, those of 1.2): ≥{LONG_OUTPUTS.share:.0%} of the needed values kept at ≥{LONG_OUTPUTS.saving:.0%} fewer tokens | "
        f"{kept} at {fewer} | {'met' if met else 'not met'} |"
    ]


def section(data: dict[str, Any], command: str = "python -m benchmarks.recall") -> str:
    from middleware import Config

    bfcl, facts, cost = data["bfcl"], data["facts"], data["cost"]
    on = {scope: next(r for r in bfcl[scope]["rows"] if r["name"] == "recall_on") for scope in bfcl}
    off = {scope: next(r for r in bfcl[scope]["rows"] if r["name"] == "recall_off") for scope in bfcl}
    lexical, semantic = _recall_rows(facts["unseen"]["rows"])
    first, held = _figures(facts["rows"]), _figures(facts["heldout"]["rows"])
    lines = [
        START,
        "## 5. Long-range memory: the archive and recall",
        "",
        f"`{command}` {at_commit()} (also part of `python -m benchmarks`). Every turn is archived as small pieces (user sentences, tool calls, observations of results, replies); before each call the store picks the pieces that share the current message's rarer words and the composer keeps what fits `memory.recall_tokens` ({Config().memory.recall_tokens}), beside older values of context keys.",
        "",
        "### 5.1 Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| sessions of 100+ turns of different tasks: ≥{MIXED.share:.0%} strict survival at ≥{MIXED.saving:.0%} fewer tokens | {_strict(on['mixed'], MIXED)} |",
        f"| the same with large outputs: ≥{MIXED_LONG.share:.0%} strict at ≥{MIXED_LONG.saving:.0%} fewer | {_strict(on['mixed_long'], MIXED_LONG)} |",
        *(
            f"| {label}: prompt flat within 10% from turn 20 to turn 100 | {on[scope]['turn20']:,.0f} → {on[scope]['turn100']:,.0f} tokens ({_growth(on[scope])}) | {_flat_verdict(on[scope])} |"
            for scope, label in (("mixed", "sessions of different tasks"), ("mixed_long", "the same with large outputs"))
        ),
        f"| tool-free conversations, the frozen unseen wordings: answer in the prompt for ≥{FACTS.share:.0%} of questions, at ≥{FACTS.saving:.0%} fewer tokens | lexical "
        + ", ".join(FACTS.cells(lexical["answered"], lexical["reduction"]))
        + ("; semantic " + ", ".join(FACTS.cells(semantic["answered"], semantic["reduction"])) if semantic else "")
        + f" (the first set, which chose the defaults: {first}; the held-out set: {held})"
        + f" | {_facts_verdict(lexical, semantic)} (see 5.4) |",
        f"| tool-free conversations, at ≥{FACT_TOKENS:.0%} fewer tokens: answers in the prompt, "
        + ", ".join(f"{label.replace(' on ', f' ≥{goal:.0%} on ', 1)}" for label, _, _, goal in FACT_GOALS)
        + " | "
        + _fact_goals(facts),
        *_long_outputs(data.get("long")),
        f"| the dataset's own short conversations keep at least today's survival | {_pct(on['single']['kept_of_full'])} (recall off, which sends what was sent before the archive: {_pct(off['single']['kept_of_full'])}) | {'met' if on['single']['kept_of_full'] >= off['single']['kept_of_full'] - 1e-9 else 'not met'} |",
        "| load and record one round trip each | one script each (semantic recall: one more call, the embedding, before them) | met |",
        *(
            f"| `build_messages` with recall at {r['archived']:,} archived turns ≤1.5× the load floor, {WORKLOADS[r.get('workload', 'short')]} | {r['ratio']:.2f}× ({r['build_p50']:.0f} µs against {r['floor_p50']:.0f} µs); {r['bytes']:,.0f} bytes sent by the server per call | {'met' if r['ratio'] <= 1.5 else 'not met (see 5.5)'} |"
            for r in cost["rows"]
        ),
        "",
        f"### 5.2 BFCL sessions of different tasks ({bfcl['mixed']['sessions']} sessions of {bfcl['mixed']['turns'][0]}–{bfcl['mixed']['turns'][-1]} turns)",
        "",
        *_bfcl_table(bfcl["mixed"]),
        "",
        f"With large tool outputs (`BFCL_v4_multi_turn_long_context`, {bfcl['mixed_long']['sessions']} sessions):",
        "",
        *_bfcl_table(bfcl["mixed_long"]),
        "",
        *_whole_bfcl(bfcl),
        f"The dataset's own conversations ({bfcl['single']['sessions']} sessions of 1–7 turns):",
        "",
        *_bfcl_table(bfcl["single"]),
        "",
        "### 5.3 Why strict survival stays far below 97%",
        "",
        "The strict measure counts a value as held when it appears anywhere earlier in the session. In sessions made of different tasks played back to back, most such values were never the current task's: door names, airport codes, dates or amounts that a *later, unrelated* task's reference call happens to use, which a model gets from the tool's schema, the user's words or its own knowledge, not from memory. The last column isolates them: values that only another task's turns hold. Values the current task's own history holds are kept at the rate of the fourth column. Closing the rest would mean sending most of the history back (a 10-message window keeps less still). "
        + _reach_text(bfcl)
        + " Where the misses come from (strict, the default):",
        "",
        "| scope | " + " | ".join(sorted({k for s in ("mixed", "mixed_long") for k in bfcl[s]["misses"]["recall_on"]})) + " |",
        "|---|" + "---:|" * len({k for s in ("mixed", "mixed_long") for k in bfcl[s]["misses"]["recall_on"]}),
        *(
            f"| {scope} | "
            + " | ".join(
                str(bfcl[scope]["misses"]["recall_on"].get(k, 0))
                for k in sorted({k for s in ("mixed", "mixed_long") for k in bfcl[s]["misses"]["recall_on"]})
            )
            + " |"
            for scope in ("mixed", "mixed_long")
        ),
        "",
        *_earlier_text(bfcl),
        f"### 5.4 Tool-free conversations ({facts['conversations']} conversations per set, of {facts['unseen']['turns'][0]}–{facts['unseen']['turns'][-1]} turns in the unseen set, built by `benchmarks/facts.py`)",
        "",
        "No public set of this kind ships in a package registry (LoCoMo and LongMemEval live on GitHub and Hugging Face, which this machine does not reach), so the sets are generated, deterministically: a user works through one long task (a renovation, a move, a trip, a thesis, a garden) in messages of 40 to 120 words, states 6 to 10 facts about themselves inside them (a name, a city, an order number, a budget, a pet, a partner, an allergy, a deadline, a project name, a car), and asks about each 20 to 100 turns later. For each fact one question shares a content word with a statement and one shares none: lexical recall cannot find the second kind, by construction. There are three sets of wordings (values, statements, questions and filler):",
        "",
        "- **unseen** (`benchmarks/facts_unseen.py`), the headline: written on 2026-11-26 by a reviewer who had not seen the middleware's code or any score, and frozen; no default was chosen on it, and none may be;",
        "- **first** (`benchmarks/facts.py`): the set recall's rules and defaults were written against (`memory.recall_tokens`, the semantic admission threshold);",
        "- **held-out** (`benchmarks/facts_heldout.py`): written by a separate reviewer without sight of the code, but a variant was rejected on it, a rule's wording quotes one of its values, and the semantic admission threshold was lowered on it and the first set together, so it fed choices too.",
        "",
        "The unseen wordings:",
        "",
        *_facts_table(facts["unseen"]["rows"]),
        "",
        "The first set:",
        "",
        *_facts_table(facts["rows"]),
        "",
        "The held-out set:",
        "",
        *_facts_table(facts["heldout"]["rows"]),
        "",
        _ceiling_text(facts),
        "",
        _neighbours_text(facts),
        "",
        _local_text(facts),
        "",
        'Tried and not adopted: rules that pick out what a user states about themselves (a first-person sentence, not a request or a question, with a clause holding a name, a number, a code, an amount or a word such as "allergic"), archived as pieces of their own and sent with every call, newest first, within a budget of their own. In side runs (not part of this run, so their figures are not quoted) they raised the first set\'s answers by half or more at every budget tried, and left the held-out set\'s where they were while adding a third or more to the tokens sent: there the rules found twenty times more clauses holding chatter ("I\'m out Monday and Wednesday for work") than holding an answer, and the newest chatter filled the budget. Rules of this kind fit the wordings they were written against; telling a fact worth keeping from chatter needs a model (an extraction call through litellm at record time, as other memory libraries do, or a stronger embedding model for semantic recall), which this machine cannot run offline to measure.',
        "",
        f'Why the targets are missed: lexical recall finds the questions that share a word with the statement and no others; semantic recall with a small local model (all-MiniLM-L6-v2, 384 dimensions) finds most paraphrases but not all ("based" against "moved to Tampere" scores below filler such as "Still working on renovating our kitchen."). The vector search reads the {NEAREST} nearest pieces and keeps the {NEAR_CANDIDATES} nearest distinct texts of archived turns the recent window does not show (filler a user repeats word for word would otherwise take every place; a phrase reworded a word at a time, with fewer than one term in {REDUNDANT} new, waits until the others have had their places); those at least {MIN_SIMILARITY} similar (chosen on the first and held-out sets: 0.2, the earlier default, left out answers the search had found) are ranked by similarity and fused with the lexical ranking by reciprocal rank fusion (each place scores 1 / ({RRF_K} + place)), and a line that repeats one already chosen with a word changed waits until the others have had the room. Both rankings also weigh a piece by how new its words were when it was written: one none of whose terms was then rare in the session (in at most two pieces) counts {FAMILIAR:.0%} of one whose terms all were, so filler that comes back turn after turn ranks below a fact said once (chosen on the first and held-out sets). In earlier side runs, before the fusion, admitting only the nearest or a higher threshold answered fewer questions of both earlier sets. A larger general-purpose embedding model (all-mpnet-base-v2, 768 dimensions) answered more of both in an earlier side run; `python -m benchmarks.recall --embedding DIR` (DIR the folder of a sentence-transformers model) measures any model on all three sets. '
        + _window_text(facts),
        "",
        "### 5.5 What recall costs per call",
        "",
        "| message | archived turns | `build_messages` p50 | load floor p50 | paired ratio | the same build with recall off: p50, ratio | bytes the server sends | server commands |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {WORKLOADS[r.get('workload', 'short')]} | {r['archived']:,} | {r['build_p50']:.0f} µs | {r['floor_p50']:.0f} µs | {r['ratio']:.2f}× | {r['off_p50']:.0f} µs, {r['off_ratio']:.2f}× | {r['bytes']:,.0f} | {r['commands']:.0f} |"
            for r in cost["rows"]
        ),
        "",
        _cost_text(cost["rows"]),
        END,
    ]
    return "\n".join(lines)


def _whole_bfcl(bfcl: dict[str, Any]) -> list[str]:
    """The default against the same with whole candidates (``uncapped``), on both scopes."""
    if not all(bfcl[scope].get("whole") for scope in ("mixed", "mixed_long")):
        return []
    parts = []
    for scope, what in (("mixed", "sessions of different tasks"), ("mixed_long", "with large outputs")):
        whole, default = bfcl[scope]["whole"], next(r for r in bfcl[scope]["rows"] if r["name"] == "recall_on")
        parts.append(
            f"{what}: strict {_pct(whole['strict'])} against {_pct(default['strict'])}, needed values kept "
            f"{_pct(whole['kept_of_full'])} against {_pct(default['kept_of_full'])}, "
            f"{whole['total_tokens'] / default['total_tokens'] - 1:+.2%} tokens".replace("-", "−")
        )
    return [
        f"Whole candidates, the default with every id of every term kept in the index and read and every common term read "
        f"(the product bounds both, {POSTINGS} bytes of ids a term and {COMMON_TERMS} common terms, to hold a recall's work "
        f"flat, 5.5): {'; '.join(parts)}.",
        "",
    ]


def _reach_text(bfcl: dict[str, Any]) -> str:
    """How far recall keyed on words could go, whatever its budget (``reach``)."""
    mixed, long = bfcl["mixed"].get("reach"), bfcl["mixed_long"].get("reach")
    if not (mixed and long):
        return ""
    return (
        f"How far recall keyed on words could go, whatever its budget: only for {_pct(mixed['by_message'])} of these values "
        f"({_pct(long['by_message'])} with large outputs) does some earlier message holding the value share a word with the current message, so a "
        "recall that selects by the message's words stays under 97% even if it sent every such message whole. Selecting by "
        f"the words of the last exchange as well reaches {_pct(mixed['by_exchange'])} ({_pct(long['by_exchange'])}), but the "
        f"messages it selects are {_pct(mixed['exchange_tokens'])} of the history's tokens ({_pct(long['exchange_tokens'])}), "
        "where the token targets leave 6% (1%). Not selecting at all but listing every distinct value earlier tool calls "
        f"used, one per line, keeps {_pct(mixed['by_ledger'])} ({_pct(long['by_ledger'])}) for {_pct(mixed['ledger_tokens'])} of "
        f"the history's tokens ({_pct(long['ledger_tokens'])}) before any other part of the prompt. Reaching 97% at −94% needs to know which earlier values a request will use: "
        "a model reading the history (an extraction or a recall call through litellm), which this offline, scripted "
        "benchmark cannot measure."
    )


LOCAL_ROW = "middleware, semantic recall, local/all-MiniLM-L6-v2 (int8 ONNX on onnxruntime, no PyTorch)"


def _local_text(facts: dict[str, Any]) -> str:
    """The offline model without PyTorch against the same model run by sentence-transformers."""
    found = []
    for name, rows in (("unseen", facts["unseen"]["rows"]), ("first", facts["rows"]), ("held-out", facts["heldout"]["rows"])):
        by = {row["strategy"]: row for row in rows}
        _, semantic = _recall_rows(rows)
        local = by.get(LOCAL_ROW)
        if local is None or semantic is None:
            return ""
        found.append(f"{name} {_pct(local['answered'])} against {_pct(semantic['answered'])} ({_saved(local)} tokens)")
    return (
        "`memory.embedding_model: local/all-MiniLM-L6-v2` runs the same model with no provider and no PyTorch (an int8 "
        "ONNX file of 23 MB on onnxruntime: `pip install 'token-middleware[local]'`); its rows above answer "
        + "; ".join(found)
        + " with sentence-transformers' float weights. A provider's embedding model through litellm "
        "(`text-embedding-3-small`, say) is the production path; this machine cannot call one to measure it."
    )


def _ceiling_text(facts: dict[str, Any]) -> str:
    """Where the answers are lost: not found by the store, or found and not kept."""
    parts, by = [], _set_rows(facts)
    for name, rows in by.items():
        lexical, semantic = _recall_rows(rows)
        recalls = [("lexical", lexical)] + ([("semantic", semantic)] if semantic else [])
        parts.append(
            f"{name}: " + ", ".join(f"{kind} {_pct(row['reached'])} (answered {_pct(row['answered'])})" for kind, row in recalls)
        )
    text = (
        "The candidate ceiling, the share of questions whose answer was in the prompt or among the archived pieces the "
        "store sent back to be ranked (whatever the ranking and the budget then kept): " + "; ".join(parts) + ". "
        "An answer outside the candidates is lost to the search (its words or its meaning did not reach it); one inside "
        "them and not answered is lost to the ranking or to the budget."
    )
    reach = facts.get("reach")
    if reach:
        text += (
            " What the words of a question can reach: the share of questions that share a word (an index term) with the "
            "statement that told their answer, a ceiling for any recall that selects by the question's words, whatever its "
            "ranking and budget: "
            + "; ".join(
                f"{name} {_pct(reach[key])} (lexical recall answered {_pct(_recall_rows(by[name])[0]['answered'])})"
                for name, key in (("unseen", "unseen"), ("first", "first"), ("held-out", "heldout"))
            )
            + ". The other questions share no word with the statement that told their answer: only meaning reaches them."
        )
    whole = facts.get("whole")
    if whole:
        text += (
            " Whole candidates (every id of every term kept in the index and read, every common term read; the product "
            f"bounds both, {POSTINGS} bytes of ids a term and {COMMON_TERMS} common terms, to hold a recall's work flat), "
            "lexical recall: "
            + "; ".join(
                f"{name}: ceiling {_pct(whole[key]['reached'])} against {_pct(_recall_rows(by[name])[0]['reached'])}, answered "
                f"{_pct(whole[key]['answered'])} against {_pct(_recall_rows(by[name])[0]['answered'])}"
                for name, key in (("unseen", "unseen"), ("first", "first"), ("held-out", "heldout"))
            )
            + f". {_bounds_verdict([(whole[key], _recall_rows(by[name])[0]) for name, key in (('unseen', 'unseen'), ('first', 'first'), ('held-out', 'heldout'))])}"
        )
    return text


def _bounds_verdict(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Whether the index's bounds lost an answer: whole candidates against the default."""
    lost = sum(round((w["answered"] - d["answered"]) * d["questions"]) for w, d in pairs)
    if lost > 0:
        return f"The bounds lose {lost} answer{'s' if lost != 1 else ''} on these sets."
    return "The bounds lose no answer on these sets."


def _neighbours_text(facts: dict[str, Any]) -> str:
    """What sentence windows did on each set: the recalled lines a neighbour joined, the
    tokens they added, and the questions only a neighbour answered (of the rows it names)."""
    parts, alone = [], 0
    for name, rows in (("unseen", facts["unseen"]["rows"]), ("first", facts["rows"]), ("held-out", facts["heldout"]["rows"])):
        lexical, semantic = _recall_rows(rows)
        recalls = [("lexical", lexical)] + ([("semantic", semantic)] if semantic else [])
        alone += sum(row["by_neighbour"] for _, row in recalls)
        parts.append(f"{name}: " + ", ".join(
            f"{kind} {row['windows']:,} neighbours, {row['window_tokens'] / row['tokens'] * 100:.2f}% of its tokens, "
            f"{row['by_neighbour']} of {row['questions']} questions answered by a neighbour alone"
            for kind, row in recalls
        ))  # fmt: skip
    why = (
        "No question of these sets was answered by a neighbour alone: each states a fact in one sentence that names it, "
        "with unrelated filler around it, so windows here only cost tokens"
        if not alone
        else f"Over these rows, {alone} {'answer' if alone == 1 else 'answers'} came from a neighbour alone: each set "
        "states a fact in one sentence that names it, with unrelated filler around it, so windows here mostly cost tokens"
    )
    return (
        "Sentence windows (either kind of recall): a recalled user sentence is given the sentences beside it in its "
        "message, where they name something specific and the recall block has room after every matched line. "
        + "; ".join(parts)
        + f'. {why}. Windows are for a fact told across sentences ("That\'s how I met Dana." then "We train together '
        'on Tuesdays."; `tests/test_recall.py` plays one).'
    )


def _window_text(facts: dict[str, Any]) -> str:
    """Why the token target is out of reach on the tool-free conversations: the recent window alone."""
    sets = {"unseen": facts["unseen"]["rows"], "first": facts["rows"], "heldout": facts["heldout"]["rows"]}
    by_set = {key: {row["strategy"]: row for row in rows} for key, rows in sets.items()}
    rows = by_set["unseen"]
    window = rows.get("last exchange only")
    others = [by_set[key].get("last exchange only") for key in ("first", "heldout")]
    if window is None or None in others:
        return ""
    room = 0.05 - (1 - window["reduction"])  # of the full history's tokens, what 95% leaves beside the window
    per_turn = max(room, 0.0) * rows["full history"]["tokens"] / sum(facts["unseen"]["turns"])
    first, held = (f"−{row['reduction'] * 100:.1f}%" for row in others if row is not None)
    return (
        "The token target is out of reach on these sets for a structural reason: the row *last exchange only* sends the "
        "system line, the last user message and reply, and the current message, nothing else, which is what the "
        f"middleware's recent window holds whole, and it is at −{window['reduction'] * 100:.1f}% already on the unseen set "
        f"({first} on the first, {held} on the held-out set): these messages run to 120 words, and the full history is short "
        f"({rows['full history']['turn100']:,.0f} tokens at turn 100). That leaves {room * 100:.1f}% of the full history for the summary "
        f"and recall together, {per_turn:.0f} tokens a turn on average; meeting 95% would mean cutting the last exchange, which the "
        "product keeps by design."
    )


def _earlier_text(bfcl: dict[str, Any]) -> list[str]:
    """What the keys set earlier buy and cost: 5.2's rows with and without them."""
    from middleware import Config

    rows = {scope: {row["name"]: row for row in bfcl[scope]["rows"]} for scope in ("mixed", "mixed_long")}
    if "no_earlier" not in rows["mixed"]:
        return []
    alone, on, every = rows["mixed"]["no_earlier"], rows["mixed"]["recall_on"], rows["mixed"].get("all_earlier")
    long_alone, long_on = rows["mixed_long"]["no_earlier"], rows["mixed_long"]["recall_on"]
    more = (
        f" Keeping every key these sessions set (`context.earlier_keys: 36`), within the same room: {_pct(every['strict'])} strict at −{every['reduction'] * 100:.1f}%."
        if every
        else ""
    )
    return [
        f"**Keys set earlier.** The arguments of earlier tool calls are what a later task's keys push out of the Current Context section (`context.max_keys`, 12). The default keeps the {Config().context.earlier_keys} keys set before those (`context.earlier_keys`) in a section of their own, one `key=value` line each, and that section shares `memory.recall_tokens` with the recall block: it comes first (its oldest keys give until it fits), and recall ranks within what it leaves. Strict survival is {_pct(on['strict'])} with them against {_pct(alone['strict'])} with recall alone (the row with `context.earlier_keys: 0`; {_pct(long_on['strict'])} against {_pct(long_alone['strict'])} with large outputs), and of the values only another task's turns hold {_pct(on['elsewhere'])} against {_pct(alone['elsewhere'])}, for {on['total_tokens'] / alone['total_tokens'] - 1:+.1%} tokens (−{on['reduction'] * 100:.1f}% against the full history). The section fills the room recall leaves early in a session, so it adds little to a long session's later turns: from turn 20 to turn 100 the prompt grows {_growth(on)} ({_growth(alone)} with recall alone; {_growth(long_on)} and {_growth(long_alone)} with large outputs).{more} Tool-free conversations set no keys, so recall there keeps the whole room (5.4).",
        "",
    ]


def _flat_verdict(row: dict[str, Any]) -> str:
    if not (row["turn20"] and row["turn100"]):
        return "not measured (sessions under 100 turns)"
    return "met" if abs(growth(row)) <= 0.10 else "not met"


def _growth(row: dict[str, Any]) -> str:
    return f"{growth(row):+.1%}" if row["turn20"] and row["turn100"] else "n/a"


def _cost_text(rows: list[dict[str, Any]]) -> str:
    """Why the build costs what it costs, from the measured ratios (the rows of the largest archive)."""
    largest = max(r["archived"] for r in rows)
    by = {r.get("workload", "short"): r for r in rows if r["archived"] == largest}
    short, long = by.get("short"), by.get("long")
    row = long or short
    assert row is not None
    off, added = row["off_ratio"], max(row["ratio"] - row["off_ratio"], 0.0)
    text = (
        "The cost is flat in the archive's size: the store reads the newest "
        f"{POSTINGS} bytes of index entries of each term of the message (about 20 to 27 pieces; of the common terms, "
        f"whose entries fill them, the first {COMMON_TERMS}) and sends at most "
        f"{CANDIDATES} pieces. It grows with the terms a message asks with, up to 24"
        + (
            f": {short['ratio']:.2f}× the floor for a one-term message against {long['ratio']:.2f}× for long ordinary ones"
            if short and long
            else ""
        )
        + f". At {largest:,} archived turns, with {'long messages' if long else 'the short message'}, it has two parts. "
        "With recall off the same build reads the four keys in one pipeline as the floor does, and is "
        f"{off:.2f}× the floor: that is decoding the replies and composing the prompt in Python. Recall adds about "
        f"{added:.2f}× of the floor ({(row['build_p50'] - row['off_p50']):.0f} µs at the median), of which the script that scores "
        f"the archive in the server's Lua interpreter takes {row.get('script_us', 0.0):.0f} µs on average (each index entry is "
        "parsed and tallied there); the rest is decoding its reply, ranking the candidates and drawing up the recall "
        "block in Python."
    )
    split = row.get("split") or {}
    if split:
        parts = [
            split["reads"],
            split["entries"] - split["reads"],
            split["scoring"] - split["entries"],
            split["whole"] - split["scoring"],
        ]
        text += (
            f" Cut short after each of its parts and replayed with the arguments the builds sent, the script spends "
            f"{parts[0]:.0f} µs on the four reads, {parts[1]:.0f} µs reading the message's index entries, {parts[2]:.0f} µs "
            f"scoring the pieces and {parts[3]:.0f} µs reading and sending the chosen ones (with the recent window's calls and results)"
            + (
                f" (with the one-term message: {short['split']['reads']:.0f}, {short['split']['entries'] - short['split']['reads']:.0f}, "
                f"{short['split']['scoring'] - short['split']['entries']:.0f} and {short['split']['whole'] - short['split']['scoring']:.0f} µs)"
                if short and short.get("split") and short is not row
                else ""
            )
            + "."
        )
    room = 1.5 * row["floor_p50"] - row["off_p50"]
    text += (
        f" Within the target a build may take {1.5 * row['floor_p50']:.0f} µs here; the same build with recall off takes "
        f"{row['off_p50']:.0f} µs, which leaves {max(room, 0.0):.0f} µs for recall"
        + (
            f", less than the script's scoring alone ({split['scoring'] - split['entries']:.0f} µs)"
            if split and room < split["scoring"] - split["entries"]
            else ""
        )
        + "."
    )
    if "native" in split:
        scorer = split["scoring"] - split["reads"]  # the script's index reads and scoring, which a native search replaces
        one = short.get("split") if short and short is not row else None
        verdict = "more" if split["native"] > scorer else "less"
        text += (
            " The server's own full-text search (FT.SEARCH with BM25 on Redis 8's query engine), asked the same queries "
            f"on an index of the same pieces (this session's alone), takes {split['native']:,.0f} µs a load on the server "
            "(two searches: the older turns, then the recent window's calls and results) "
            f"against {scorer:.0f} µs for the index reads and scoring of the script it would replace"
            + (
                f" (with the one-term message: {one['native']:,.0f} against {one['scoring'] - one['reads']:.0f} µs)"
                if one and "native" in one
                else ""
            )
            + f": ranking natively costs {verdict}, before the hash of its own each piece would need, written with every turn"
            + (
                ", so recall ranks with the script on every server. What would close the gap is a cheaper compose "
                f"({off:.2f}× the floor without recall) and a cheaper scorer than either."
                if verdict == "more"
                else f". What would close the gap is a cheaper compose ({off:.2f}× the floor without recall) and that native ranking."
            )
        )
    else:
        text += f" What would close it is a cheaper compose ({off:.2f}× the floor without recall) and a cheaper scorer."
    return text


def compare_embedding(path: str, count: int) -> None:
    """The tool-free conversations with semantic recall by a local model, beside all-MiniLM-L6-v2, the
    model the report uses: how far a stronger embedding model carries."""
    from benchmarks.embeddings import register, register_local
    from benchmarks.facts import conversations, measure, rows
    from benchmarks.overhead import server
    from middleware import Config

    logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    name = Path(path).name or path
    variants = {
        "semantic recall, all-MiniLM-L6-v2": {"recall": "semantic", "embedding_model": register()},
        f"semantic recall, {name}": {"recall": "semantic", "embedding_model": register_local(path)},
    }
    with server() as node:
        if "search" not in node.modules:
            raise SystemExit("semantic recall needs a server with the query engine (the bench extra's Redis 8)")
        config = Config().with_overrides(usage_log={"path": None}, store={"url": node.url})
        for label, wording in (("first set", "first"), ("held-out wordings", "heldout"), ("unseen wordings", "unseen")):
            sets = conversations(count, wording=wording)
            found = rows(measure(sets, config, variants))
            print(f"{label}, {len(sets)} conversations:")
            for row in found[2:]:
                print(
                    f"  {row['strategy']}: answer in the prompt {_pct(row['answered'])} of {row['questions']}, {_saved(row)} tokens"
                )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run on part of the data (does not write the report)")
    parser.add_argument(
        "--embedding",
        metavar="DIR",
        help="only the tool-free conversations, with semantic recall by the "
        "sentence-transformers model saved in DIR (printed, not written to the report)",
    )
    parser.add_argument("--conversations", type=int, default=40, metavar="N", help="with --embedding: the first N of each set")
    parser.add_argument("--keep", metavar="FILE", help="also keep the run's figures in FILE (a pickle), to re-render later")
    parser.add_argument("--from", dest="saved", metavar="FILE", help="re-render the section from a run kept with --keep")
    args = parser.parse_args()
    if args.embedding:
        compare_embedding(args.embedding, args.conversations)
        return
    if args.saved:  # re-render a kept run (to edit the text without replaying)
        write_section(REPORT, section(pickle.loads(Path(args.saved).read_bytes())), START, END)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
        tasks: dict[str, Any] = {}

        def tick(stage: str, n: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=None)
            progress.advance(tasks[stage], n)

        data = run(args.quick, tick)
    if args.keep:
        Path(args.keep).write_bytes(pickle.dumps(data))
    text = section(data, "python -m benchmarks.recall" + (" --quick" if args.quick else ""))
    print(text)
    if not args.quick:
        write_section(REPORT, text, START, END)
    print(f"{(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)


if __name__ == "__main__":
    main()
