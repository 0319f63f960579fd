"""What a process learns of how a model uses tools: which are called together (``CoUse``)
and how often a tool matched at each rank is called (``MatchOdds``). No I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["CoUse", "MatchOdds"]


class CoUse:
    """Which tools are called together, from the turns recorded (tool names only): per tool,
    the turns that called it and, of those, how many also called each other tool, and how
    many had the other out of reach (its schema neither sent nor loaded: ``out_of_reach``),
    which do not count against it. Without that, a tool disclosure seldom sends is seldom
    called, so it never becomes a companion and is never sent: the turns that could not call
    it would be read as turns that chose not to. Bounded: a turn teaches at most ``per_turn``
    names; past ``limit`` names the less used half is forgotten, and a tool keeps its
    ``2 * keep`` most frequent companions, and tools most often out of reach, at most. Not
    thread-safe: its owner serializes access."""

    def __init__(
        self, *, limit: int = 4096, min_turns: int = 3, min_share: float = 0.5, per_turn: int = 32, keep: int = 64
    ) -> None:
        self.limit, self.min_turns, self.min_share, self.per_turn, self.keep = limit, min_turns, min_share, per_turn, keep
        self.turns: Counter[str] = Counter()
        self.together: dict[str, Counter[str]] = {}
        self.unreached: dict[str, Counter[str]] = {}  # per tool: the turns that called it with another out of reach

    def learn(self, names: Iterable[str]) -> None:
        """One turn's called tools."""
        called = list(dict.fromkeys(names))[: self.per_turn]
        if len(self.turns) + sum(1 for name in called if name not in self.turns) > self.limit:
            for name, _ in self.turns.most_common()[self.limit // 2 :]:  # the less used half goes
                del self.turns[name]
                self.together.pop(name, None)
                self.unreached.pop(name, None)
        for name in called:
            self.turns[name] += 1
            self._count(self.together, name, (other for other in called if other != name))

    def out_of_reach(self, called: Iterable[str], unreached: Iterable[str]) -> None:
        """One turn's called tools and the tools it could not call (``unreached``: their
        schemas neither sent nor loaded), apart from ``learn``, which counts the turn."""
        out = list(dict.fromkeys(unreached))
        if not out:
            return
        for name in list(dict.fromkeys(called))[: self.per_turn]:
            self._count(self.unreached, name, out)

    def _count(self, table: dict[str, Counter[str]], name: str, others: Iterable[str]) -> None:
        """``others`` counted once more under ``name`` in ``table``; past ``2 * keep``
        names, the ``keep`` most frequent kept."""
        counter = table.setdefault(name, Counter())
        counter.update(others)
        if len(counter) > 2 * self.keep:
            table[name] = Counter(dict(counter.most_common(self.keep)))

    def companions(self, names: Iterable[str]) -> list[str]:
        """Tools called in at least ``min_share`` of the turns that called one of ``names`` and
        could have called them (each such pair seen in ``min_turns`` turns or more), most often
        first; ``names`` themselves left out."""
        given = list(dict.fromkeys(names))
        best: dict[str, float] = {}
        for name in given:
            seen = self.turns[name]
            if seen < self.min_turns:
                continue
            unreached: Counter[str] = self.unreached.get(name, Counter())
            for other, together in self.together.get(name, {}).items():
                reach = seen - unreached.get(other, 0)
                if reach < self.min_turns:
                    continue
                share = min(together / reach, 1.0)
                if share >= self.min_share and share > best.get(other, 0.0):
                    best[other] = share
        return [name for name in sorted(best, key=lambda n: -best[n]) if name not in given]


class MatchOdds:
    """How often a tool matched to the message at each rank (best first) is called in its
    turn, and how often a companion sent with the matches (``CoUse``) is, counted apart for
    turns where tools used earlier stay (what a request needs has mostly been sent already)
    and turns where none do. Each count starts as if one tool in two had been called, so a
    process starts out sending them all, as a fresh catalog needs. Ranks past ``ranks``
    share the last count."""

    COMPANION = -1  # the rank companions are counted under

    def __init__(self, ranks: int = 16) -> None:
        self.ranks = ranks
        self._seen: dict[tuple[bool, int], list[int]] = {}  # (settled, rank) -> [called, offered]
        self._missed = [1, 4]  # [turns that called a tool not sent up front, turns]

    def chance(self, settled: bool, rank: int) -> float:
        called, offered = self._seen.get((settled, min(rank, self.ranks - 1)), (1, 2))
        return called / offered

    def misses(self) -> float:
        """How often a turn calls a tool its first call did not carry (a loader round, where
        tools are disclosed). Starts as if one turn in four had."""
        missed, turns = self._missed
        return missed / turns

    def note_miss(self, missed: bool) -> None:
        """One turn, and whether it called a tool its disclosed first call would not have carried."""
        self._missed[0] += missed
        self._missed[1] += 1

    def note(self, settled: bool, ranked: Sequence[str], companions: Sequence[str], called: Iterable[str]) -> None:
        """One turn's matched tools, best first, and companions (sent or not), and the tools it called."""
        names = set(called)
        offered = [*((min(rank, self.ranks - 1), name) for rank, name in enumerate(ranked)),
                   *((self.COMPANION, name) for name in companions)]  # fmt: skip
        for rank, name in offered:
            counts = self._seen.setdefault((settled, rank), [1, 2])
            counts[0] += name in names
            counts[1] += 1
