"""The store plans alone: fed replies by hand, no Redis, no driver."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import orjson
import pytest
from redis.exceptions import NoScriptError, ResponseError

from middleware import Config, InvalidInputError, SessionState, StoreError, StoreUnavailableError, ToolCall, Turn, apply_turn
from middleware.core.effects import Batch
from middleware.store import keys as store_keys
from middleware.store import load as store_load
from middleware.store import notes as store_notes
from middleware.store import record as store_record
from middleware.store import sessions as store_sessions

LAYOUT = store_keys.Layout.of(Config())
CLUSTER = store_keys.Layout.of(Config().with_overrides(store={"cluster": True}))
KEYS = LAYOUT.session("s1")


def play(plan: Generator[Batch, list[Any], Any], *replies: Any) -> tuple[list[Batch], Any]:
    """Run ``plan`` feeding it ``replies`` in order (a list, or a function of the batch);
    the batches it sent and its result. Fails if it asks for more round trips than that."""
    batches: list[Batch] = []
    try:
        batch = next(plan)
        for reply in replies:
            batches.append(batch)
            batch = plan.send(reply(batch) if callable(reply) else reply)
    except StopIteration as stop:
        return batches, stop.value
    raise AssertionError(f"the plan asked for another round trip: {batch}")


def replies_of(value: Any) -> Any:
    """A reply of ``value`` to every command of the batch."""
    return lambda batch: [value] * len(batch.commands)


def stored(role: str, content: str, tokens: int = 5, turn: str = "t") -> bytes:
    return orjson.dumps({"role": role, "content": content, "tokens": tokens, "turn": turn})


def update(turn_id: str = "t9", **tool: Any) -> Any:
    calls = (ToolCall(name="navigate_to_node", arguments=tool),) if tool else ()
    return apply_turn(Turn(user="goto shop", assistant="ok", tool_calls=calls), Config(), turn_id=turn_id)


def test_a_load_is_one_batch_of_four_reads_decoded_into_the_state() -> None:
    """load reads ctx, summary, recent and meta in one pipeline and decodes them."""
    replies = [
        [(b"ui=tv", 2.0), (b"ui=old", 1.0), (b"node=shop", 3.0)],
        [b"\xe2\x80\xa2 one \xe2\x86\x92 did one", b"\xe2\x80\xa2 two \xe2\x86\x92 did two"],
        [stored("user", "goto shop"), stored("assistant", "ok")],
        {b"turns": b"2", b"full_tokens": b"40"},
    ]
    batches, loaded = play(store_load.load(LAYOUT, "s1"), replies)
    assert [b.transaction for b in batches] == [False] and [c[0] for c in batches[0].commands] == [
        "zrange",
        "lrange",
        "lrange",
        "hgetall",
    ]
    state = loaded.state
    assert state.context == {"ui": "tv", "node": "shop"}  # the highest score wins
    assert state.summary == ["• one → did one"]  # the last line belongs to the turn in the recent window
    assert state.recent == [{"role": "user", "content": "goto shop"}, {"role": "assistant", "content": "ok"}]
    assert (state.turns, state.full_tokens, loaded.corrupt) == (2, 40, ())
    # Built without __init__ for speed: every field is set, and it equals the same state built normally.
    assert state.__dict__.keys() == SessionState.__dataclass_fields__.keys()
    assert state == SessionState(**state.__dict__)


def test_corrupt_records_come_back_with_the_result() -> None:
    """Unusable members, entries and numbers are skipped and listed, part by part (no logging, no thread-local)."""
    replies = [
        [(b"no equals", 1.0), (b"bad key!=v", 1.0)],
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        [b"\xff garbage"],
        {b"turns": b"lots"},
    ]
    _, loaded = play(store_load.load(LAYOUT, "s1"), replies)
    assert [c.part for c in loaded.corrupt] == ["sum", "ctx", "ctx", "recent", "meta"]
    assert loaded.state.is_empty and loaded.corrupt[0].reason.startswith("unreadable: WRONGTYPE")


def test_the_notes_of_a_known_owner_join_the_load_and_a_new_owner_costs_a_second_read() -> None:
    """With the owner the caller saw, the notes come in the same round trip; when the stored
    owner differs, one more read fetches theirs."""
    empty = [[], [], [], {b"user": b"alice", b"agent": b"atlas"}]
    batches, loaded = play(store_load.load(LAYOUT, "s1", owner=("alice", "atlas")), [*empty, b"- likes tv"])
    assert len(batches) == 1 and batches[0].commands[-1] == ("get", store_keys.pair_keys("mw", "alice", "atlas").notes)
    assert loaded.state.notes == "- likes tv" and loaded.state.owner == ("alice", "atlas")
    batches, loaded = play(store_load.load(LAYOUT, "s1", owner=("bob", "atlas")), [*empty, b"bob's"], [b"alice's"])
    assert len(batches) == 2 and loaded.state.notes == "alice's"


def test_a_record_is_one_script_sent_by_its_sha_with_every_key_and_the_index() -> None:
    """record sends one command, the record script by its SHA, naming every key of the
    session and the listing index, carrying the turn id and the turn's parts; it reads
    nothing else. The script's reply is the turn count, whether it wrote, and repairs."""
    batches, recorded = play(store_record.record(LAYOUT, "s1", update("t9", ui="tv"), now=100.0), [[3, 1]])
    ((command,),) = [b.commands for b in batches]
    written = store_keys.recorded_keys(KEYS)  # every key but the endpoint's live hash, which a record does not touch
    assert command[:3] == ("evalsha", store_record.RECORD.sha, len(written) + 1) and not batches[0].transaction
    assert command[3 : 3 + len(written) + 1] == (*written, LAYOUT.index)
    assert "t9" in command and "ui" in command and "tv" in command
    assert recorded == store_record.Recorded(turns=3)


def test_a_server_without_the_script_is_sent_it_once() -> None:
    """NOSCRIPT (a new server, a restart, SCRIPT FLUSH): the same call again with the script's text."""
    missing = NoScriptError("No matching script. Please use EVAL.")
    batches, recorded = play(store_record.record(LAYOUT, "s1", update(), now=1.0), [missing], [[1, 1]])
    assert batches[1].commands[0][:2] == ("eval", store_record.RECORD.text)
    assert batches[1].commands[0][2:] == batches[0].commands[0][2:] and recorded.turns == 1


def test_a_retried_turn_the_script_had_written_says_so_and_what_it_repaired() -> None:
    """The script answers 0 for a turn id it had already written (nothing written twice),
    and names the keys and counter fields it repaired."""
    _, recorded = play(store_record.record(LAYOUT, "s1", update(), now=1.0), [[5, 0]])
    assert recorded == store_record.Recorded(turns=5, written=False)
    _, recorded = play(
        store_record.record(LAYOUT, "s1", update(), now=1.0), [[1, 1, KEYS.recent.encode(), f"{KEYS.meta} turns".encode()]]
    )
    assert recorded.repaired == (KEYS.recent, f"{KEYS.meta} turns")


def test_on_a_cluster_the_index_is_written_after_the_turn_and_never_fails_it() -> None:
    """The index lives in another slot: its own round trip, after the turn; an index the
    cluster cannot write (its node down) leaves the turn recorded, with the reason."""
    batches, recorded = play(store_record.record(CLUSTER, "s1", update(), now=100.0), [[7, 1]], [1, 0])
    assert LAYOUT.index not in batches[0].commands[0] and batches[1].commands[0][1] == LAYOUT.index
    assert recorded == store_record.Recorded(turns=7)
    _, recorded = play(store_record.record(CLUSTER, "s1", update(), now=100.0), [[7, 1]], [ResponseError("CLUSTERDOWN down"), 0])
    assert recorded.turns == 7 and recorded.index_error == "CLUSTERDOWN down"
    plan = store_record.record(CLUSTER, "s1", update(), now=100.0)
    next(plan), plan.send([[7, 1]])
    with pytest.raises(StopIteration) as stop:
        plan.throw(StoreUnavailableError("node unreachable"))
    assert stop.value.value.index_error == "node unreachable"
    _, recorded = play(store_record.record(CLUSTER, "s1", update(), now=100.0), [[7, 0]])  # a retry: the index was kept then
    assert recorded.written is False


def test_an_error_reply_that_is_not_a_foreign_key_fails_the_operation() -> None:
    """A refusal (no permission, cluster down, out of memory) is a StoreError, with what
    Redis said and not the command redis-py quotes before it; a load never reads it as
    an empty session, a record never reads it as written."""
    quoted = ResponseError(
        "Command # 1 (ZRANGE mw:{s1}:ctx 0 -1 WITHSCORES) of pipeline caused error: CLUSTERDOWN The cluster is down"
    )
    with pytest.raises(StoreError, match="CLUSTERDOWN The cluster is down") as info:
        play(store_load.load(LAYOUT, "s1"), [quoted, [], [], {}])
    assert "Command #" not in str(info.value)
    with pytest.raises(StoreError, match="OOM"):
        play(store_record.record(LAYOUT, "s1", update(), now=1.0), [ResponseError("OOM command not allowed")])


def test_resolving_a_session_keeps_the_winner_of_a_race() -> None:
    """HSETNX settles two first calls: the loser returns the winner's id after one round trip;
    a new session is activated and given its owner."""
    batches, winner = play(
        store_sessions.resolve_session(LAYOUT, "alice", "atlas", candidate="mine", now=1.0), [1, 1, 1, b"theirs", 1]
    )
    assert (len(batches), winner) == (1, "theirs")
    batches, sid = play(
        store_sessions.resolve_session(LAYOUT, "alice", "atlas", candidate="mine", now=1.0, new=True), [1, 1, 1, 1], [1, 1]
    )
    assert sid == "mine" and [b.transaction for b in batches] == [True, False]
    assert batches[1].commands[0] == ("hset", LAYOUT.session("mine").meta, None, None, {"user": "alice", "agent": "atlas"})


def test_a_notes_edit_is_compare_and_set_and_tries_again_when_someone_wrote_first() -> None:
    """The edit reads, then sets only if the notes are unchanged; a refused set reads again."""
    edits: list[str] = []

    def append(current: str) -> str:
        edits.append(current)
        return (current + "\n- new").strip()

    batches, result = play(store_notes.edit_notes(LAYOUT, "u", "a", append, edit_id="e1"), [None], [0], [b"- theirs"], [1])
    assert result == "- theirs\n- new" and edits == ["", "- theirs"]
    keys = store_keys.pair_keys("mw", "u", "a")
    assert batches[1].commands[0][:2] == ("execute_command", "EVAL")
    assert batches[1].commands[0][3:] == (2, keys.notes, keys.edits, "", "- new", "e1", store_notes.NOTES_EDIT_IDS)


def test_a_notes_edit_that_never_wins_is_an_error_not_a_loop() -> None:
    plan = store_notes.edit_notes(LAYOUT, "u", "a", lambda current: current + "x", edit_id="e1")  # every set refused
    with pytest.raises(StoreError, match="changed under"):
        play(plan, *([[None], [0]] * store_notes.NOTES_ATTEMPTS))


def test_error_replies_are_store_errors_where_nothing_can_be_skipped() -> None:
    """An error reply to a read the operation cannot do without is a StoreError naming it."""
    with pytest.raises(StoreError, match="NOPERM"):
        play(store_sessions.ping(LAYOUT), [ResponseError("NOPERM this user has no permissions")])
    with pytest.raises(StoreError, match="WRONGTYPE"):
        play(store_notes.edit_notes(LAYOUT, "u", "a", str, edit_id="e1"), [ResponseError("WRONGTYPE")])


def test_listing_pages_through_the_index_and_forgets_expired_sessions() -> None:
    """A search scans the index until its cursor is 0; sessions gone from the store are
    dropped from the page and from the index."""
    live = [[(b"k=v", 1.0)], [], [], {b"turns": b"3", b"updated": b"50.0"}]
    gone: list[Any] = [[], [], [], {}]
    plan = store_sessions.list_sessions(LAYOUT, search="user", page=1, page_size=10)
    scans = [[(5, [(b"user-1", 50.0)])], [(0, [(b"user-2", 40.0)])]]
    batches, page = play(plan, *scans, [*live, *gone], [1])
    assert [b.commands[0][0] for b in batches] == ["zscan", "zscan", "zrange", "zrem"]
    assert batches[0].commands[0][3] == "*user*" and batches[-1].commands[0] == ("zrem", LAYOUT.index, "user-2")
    assert [(e.session_id, e.turns, e.context_keys) for e in page.entries] == [("user-1", 3, 1)] and page.total == 1


@pytest.mark.parametrize("search", [None, "user"])
def test_a_page_no_redis_range_can_reach_is_refused_before_any_command(search: str | None) -> None:
    """Page 10**20 is an InvalidInputError naming it, not a range Redis refuses (a StoreError)."""
    with pytest.raises(InvalidInputError, match=r"Page 100000000000000000000 is out of range; expected .* up to 1,000,000,000"):
        next(store_sessions.list_sessions(LAYOUT, search=search, page=10**20))
    assert (
        next(store_sessions.list_sessions(LAYOUT, page=store_sessions.MAX_PAGE)).commands[1][2]
        == (store_sessions.MAX_PAGE - 1) * 20
    )


def test_an_inspection_never_asks_redis_for_an_impossible_count_of_traces() -> None:
    """A huge trace count reads at most what any writer keeps (100,000), not a range Redis refuses."""
    batch = next(store_sessions.inspect(LAYOUT, "s1", traces=10**20))
    assert batch.commands[4] == ("lrange", KEYS.traces, -100_000, -1)


def test_search_text_is_matched_literally() -> None:
    """Glob characters in the search text are escaped before they reach SCAN MATCH."""
    batch = next(store_sessions.list_sessions(LAYOUT, search="a*[b]?"))
    assert batch.commands[0][3] == "*a\\*\\[b\\]\\?*"


def test_inspection_reads_state_traces_and_prompt_in_one_round_trip() -> None:
    replies = [[], [], [], {b"turns": b"1"}, [b"trace"], b'{"messages": []}']
    batches, seen = play(store_sessions.inspect(LAYOUT, "s1", traces=5), replies)
    assert len(batches) == 1 and batches[0].commands[4] == ("lrange", KEYS.traces, -5, -1)
    assert (seen.state.turns, seen.traces, seen.prompt) == (1, [b"trace"], b'{"messages": []}')
