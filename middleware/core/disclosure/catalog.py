"""The catalog of a chat's tools (grouped, indexed, matched to a message) and the tools one
turn discloses from it (``DisclosedTools``). No I/O."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...config.sections import DisclosureConfig
from ..lexical import Bm25, tokens
from ..state import is_tool_name
from ..text import capped_count, one_line, quoted
from .groups import ToolEntry, description_of, shared_preamble, without_preamble
from .odds import CoUse

__all__ = ["LOADER_DESCRIPTION", "Catalog", "Companions", "DisclosedTools", "Uses"]

# Tool name -> (order key of when it was first sent in its current run of use, last turn used).
Uses = Mapping[str, tuple[int, int]]
# Given tools, and the names sent already: those usually called with them, not sent (CoUse).
Companions = Callable[[Sequence[str], Collection[str]], Sequence[str]]

LOADER_DESCRIPTION = "Load tools by tool or group name before calling them. Tools by group:"
# In ranking by meaning, the weight of a tool's cosine with the message beside its word
# score, scaled so that the best word match scores 1 (a cosine runs from -1 to 1).
MEANING_WEIGHT = 2.0
# A tool that shares no word with the message is matched by meaning only when its cosine
# stands out: this many standard deviations above the mean over the tool set. Embedding
# models give unrelated texts small positive cosines, so "thanks!" matches little or nothing.
MEANING_STANDOUT = 1.5
# How many matches, times ``disclosure.match_tools``, a turn's second loader call adds at
# most (DisclosedTools.following): chosen on data the report does not measure (benchmarks.tuning).
SEARCH_MATCHES = 3
_MEANING_CHARS = 1_000  # of a tool's name and description, embedded
_INDEX_CHARS = 12_000  # the index in the loader's description, at most (names are cut past it)


class Catalog:
    """The tools a chat may use, grouped and indexed, and the loader that opens them."""

    def __init__(self, entries: Sequence[ToolEntry], *, loader_name: str = "load_tools") -> None:
        self.entries = {entry.name: entry for entry in entries}
        self.loader_name = loader_name
        self.groups: dict[str, list[str]] = {}
        for entry in entries:
            self.groups.setdefault(entry.group, []).append(entry.name)
        self._bm25 = Bm25([entry.text for entry in entries])
        # Per group, the opening its tools' descriptions share, and their schemas without it.
        self.preambles = {group: shared_preamble([description_of(self.entries[n].schema) for n in names])
                          for group, names in self.groups.items()}  # fmt: skip
        self.shortened = {entry.name: without_preamble(entry.schema, self.preambles[entry.group])
                          for entry in entries if self.preambles[entry.group]}  # fmt: skip
        self._order = {name: index for index, name in enumerate(self.entries)}
        self.loader_schema = self._loader_schema()
        # Each tool's embedding and its norm, in catalog order, once made (see meaning_texts).
        self.vectors: list[tuple[Sequence[float], float]] | None = None

    def meaning_texts(self) -> list[str]:
        """What ranking by meaning embeds of each tool, in catalog order: its name as words
        and its description without the group's shared opening."""
        texts = [f"{' '.join(tokens(name))}: {description_of(self.shortened.get(name, entry.schema))}"
                 for name, entry in self.entries.items()]  # fmt: skip
        return [text[:_MEANING_CHARS] for text in texts]

    def set_vectors(self, vectors: Sequence[Sequence[float]]) -> None:
        """The embeddings of ``meaning_texts()``, one per tool in the same order, all of one size."""
        if len(vectors) != len(self.entries):
            raise ValueError(f"{len(vectors)} vectors for {len(self.entries)} tools; expected one per tool")
        sizes = sorted({len(vector) for vector in vectors})
        if len(sizes) > 1 or sizes == [0]:
            raise ValueError(f"vectors of sizes {sizes[:5]}; expected one size, above 0")
        self.vectors = [(vector, math.sqrt(sum(x * x for x in vector)) or 1.0) for vector in vectors]

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def index(self) -> str:
        """One line per group: its name and its tools' names. Past ~12,000 characters the
        largest groups are listed by name and size only (loading a group opens all of its
        tools), so every tool stays reachable."""
        lines = {group: f"- {listed(group)}: {', '.join(map(listed, names))}" for group, names in self.groups.items()}
        for group in sorted(self.groups, key=lambda g: -len(lines[g])):
            if sum(map(len, lines.values())) + len(lines) <= _INDEX_CHARS:
                break
            lines[group] = f"- {listed(group)}: {len(self.groups[group])} tools (load the group to see them)"
        return "\n".join(lines.values())

    def _loader_schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": self.loader_name, "description": f"{LOADER_DESCRIPTION}\n{self.index()}",
            "parameters": {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                           "required": ["names"]},
        }}  # fmt: skip

    def resolve(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """(tool names, in catalog order, that ``names`` denote: tools, or every tool of a
        group; names that denote nothing)."""
        found: set[str] = set()
        unknown: list[str] = []
        for name in names:
            if name in self.entries:
                found.add(name)
            elif name in self.groups:
                found.update(self.groups[name])
            else:
                unknown.append(name)
        return sorted(found, key=self._order.__getitem__), unknown

    def match(self, message: str, limit: int, vector: Sequence[float] = ()) -> list[str]:
        """Up to ``limit`` tools sharing words with ``message``, best first (ties: catalog
        order); with the message's embedding (``vector``) and the tools' (``set_vectors``),
        ranked by their meaning as well: a tool's word score scaled so the best is 1, plus
        ``MEANING_WEIGHT`` times its cosine, for the tools that share a word with the message
        or whose cosine stands out (``MEANING_STANDOUT``)."""
        if limit <= 0 or not self.entries:
            return []
        scores = self._bm25.scores(message)
        if vector and self.vectors is not None and len(vector) == len(self.vectors[0][0]):
            best, norm = max(scores), math.sqrt(sum(x * x for x in vector)) or 1.0
            cosines = [sum(map(operator.mul, vector, tool)) / (norm * size) for tool, size in self.vectors]
            mean = sum(cosines) / len(cosines)
            spread = math.sqrt(sum((c - mean) ** 2 for c in cosines) / len(cosines))
            bar = mean + MEANING_STANDOUT * spread if spread > 1e-9 else math.inf  # all alike: none stands out
            scores = [(score / best if best > 0 else 0.0) + MEANING_WEIGHT * cosine if score > 0 or cosine >= bar else 0.0
                      for score, cosine in zip(scores, cosines, strict=True)]  # fmt: skip
        scored = [(score, -i, name) for i, (name, score) in enumerate(zip(self.entries, scores, strict=True))]
        return [name for score, _, name in sorted(scored, reverse=True)[:limit] if score > 0]

    def select(
        self,
        uses: Uses,
        turn: int,
        message: str,
        policy: DisclosureConfig,
        *,
        co_use: CoUse | None = None,
        exact: bool = False,
        vector: Sequence[float] = (),
        cached: Callable[[Sequence[Mapping[str, Any]]], bool] | None = None,
        grows: Callable[[Sequence[Mapping[str, Any]]], bool] | None = None,
        fits: Callable[[Sequence[Mapping[str, Any]]], bool] | None = None,
    ) -> DisclosedTools:
        """What turn number ``turn`` sends up front: pinned, then recently used, then matched
        tools (by meaning too, given the message's embedding ``vector``) and the companions
        (``co_use``) of the best matches, staying ones included (not of every tool that
        stays). ``exact``: the schemas as given (for a chatbot handed the tools themselves),
        even with ``policy.share_preambles`` on. ``cached``: given the schemas
        that would stay from turn to turn (the loader, pinned and recent tools), whether they
        are worth keeping with the model's prompt caching; when not, recently used tools do
        not stay, and come back when matched, loaded or called. ``grows``: given the same
        schemas, whether they are still short of the model's minimum cached prefix where
        keeping them pays; then the matched tools stay too (``DisclosedTools.grown``), and
        with them the next best matches for the message, then the other tools in the
        catalog's order, as few as bring the list to the minimum (``_filling``): it is
        cached from the next call on, instead of being paid in full on every call until
        enough tools were used, and a tool the turn needs is more likely sent already; as
        many as ``fits`` allows (given the schemas that would stay), where it is given."""
        pinned, _ = self.resolve(policy.always)
        recent = [name for name, (_, last) in sorted(uses.items(), key=lambda item: item[1][0])
                  if name in self.entries and 0 < turn - last <= policy.recent_turns]  # fmt: skip
        if policy.recent_scope == "skill":
            groups = dict.fromkeys(self.entries[name].group for name in recent)
            recent = [name for group in groups for name in self.groups[group]]
        share = policy.share_preambles and not exact
        stable = list(dict.fromkeys([*pinned, *recent]))
        # What would stay from turn to turn, as schemas: asked about when there is someone to ask.
        staying = (
            DisclosedTools(self, names=stable, stable=len(stable), share_preambles=share).schemas() if cached or grows else []
        )
        if cached is not None and len(stable) > len(pinned) and not cached(staying):
            stable = list(pinned)
            staying = DisclosedTools(self, names=stable, stable=len(stable), share_preambles=share).schemas() if grows else []
        growing = grows is not None and grows(staying)
        # The best matches overall: those already sent add nothing, and the list stays put.
        # The next ones after them wait for a turn whose loads did not find what it needed.
        # A growing turn ranks every tool once: the fill takes the next best after them.
        reach = (1 + SEARCH_MATCHES) * policy.match_tools + len(stable)
        every = self.match(message, len(self.entries) if growing else reach, vector)
        best = every[:reach]
        ranked = [name for name in best[: policy.match_tools] if name not in stable]
        following = [name for name in best[policy.match_tools :] if name not in stable][: SEARCH_MATCHES * policy.match_tools]
        learned = co_use.companions(best[: policy.match_tools]) if co_use is not None and policy.co_use_tools else []
        companions = [name for name in learned if name in self.entries and name not in stable][: policy.co_use_tools]
        filling: list[str] = []
        if growing and grows is not None:
            filling = self._filling(stable, [*ranked, *companions], every, share, grows, fits)
            following = [name for name in following if name not in filling]
        matched = sorted([*ranked, *companions, *filling], key=self._order.__getitem__)
        grown = len(matched) if growing else 0
        return DisclosedTools(self, names=[*stable, *matched], stable=len(stable) + grown, share_preambles=share, grown=grown,
                              growing=growing, pinned=len(pinned), ranked=ranked, companions=companions,
                              settled=len(stable) > len(pinned), following=following)  # fmt: skip

    def _filling(
        self,
        stable: list[str],
        matches: list[str],
        best: list[str],
        share: bool,
        grows: Callable[[Sequence[Mapping[str, Any]]], bool],
        fits: Callable[[Sequence[Mapping[str, Any]]], bool] | None = None,
    ) -> list[str]:
        """The fewest tools to add to ``stable`` and ``matches`` that bring the tools that
        stay to the model's minimum cached prefix (``grows`` false), or every other tool:
        the next ``best`` matches for the message, then the others in the catalog's order;
        fewer where more would not ``fit``. Each list is counted as it is sent (the matched
        tools after the stable ones in the catalog's order, where a group's shared opening
        goes with its first tool). Each further tool only adds tokens, so the count is
        searched for (``_first``): a few counts of lists near the minimum, not one per tool,
        none asked about twice."""
        chosen = {*stable, *matches}
        pool = list(dict.fromkeys(name for name in [*best, *self.entries] if name not in chosen))

        def schemas(count: int) -> list[dict[str, Any]]:
            kept = [*stable, *sorted([*matches, *pool[:count]], key=self._order.__getitem__)]
            return DisclosedTools(self, names=kept, stable=len(kept), share_preambles=share).schemas()

        @functools.cache
        def short(count: int) -> bool:
            return grows(schemas(count))

        @functools.cache
        def over(count: int) -> bool:
            return fits is not None and not fits(schemas(count))

        if not pool or not short(0) or over(0):
            return []
        count = min(_first(len(pool), lambda count: not short(count)), len(pool))
        if over(count):
            count = _first(count, over) - 1
        return pool[:count]


def _first(limit: int, reached: Callable[[int], bool]) -> int:
    """The least count from 1 to ``limit`` that is ``reached`` (every larger count is too),
    or ``limit`` + 1 when none is: doubling from 1, then a binary search in the last step
    (where the doubling stopped short of ``limit``, ``high`` is reached: not probed again)."""
    high = 1
    while high < limit and not reached(high):
        high *= 2
    return bisect.bisect_left(range(high // 2 + 1, high if high < limit else limit + 1), True, key=reached) + high // 2 + 1


_MAX_ECHO = 20  # names echoed back in a loader answer


@dataclass
class DisclosedTools:
    """The tools one turn has sent so far: what it started with, then what it loaded (appended)."""

    catalog: Catalog
    names: list[str]
    stable: int  # the first ``stable`` names (after the loader) stay from turn to turn
    loaded: list[str] = field(default_factory=list)
    share_preambles: bool = False  # a group's shared opening only in the first of its tools sent
    # The last ``grown`` of the stable names joined them this turn: matched tools that stay
    # (like used ones) while the stable list is short of the model's minimum cached prefix.
    grown: int = 0
    growing: bool = False  # the stable list is short of that minimum, and grows this way
    pinned: int = 0  # the first ``pinned`` names are disclosure.always's
    # The tools matched to the message (not those that stay, nor companions), best first.
    ranked: list[str] = field(default_factory=list)
    companions: list[str] = field(default_factory=list)  # then the tools sent with them (CoUse)
    settled: bool = False  # tools used earlier stay (beyond the pinned ones)
    # The matches for the message after those ranked (SEARCH_MATCHES times as many at most):
    # what a second loader call of the turn adds, with any ranked match left out, the first
    # having not found what the model needed.
    following: list[str] = field(default_factory=list)
    loads: int = 0  # the loader calls this turn that named tools (a call of the wrong shape is not counted)
    referenced: list[str] = field(default_factory=list)  # what the loader's answers referenced (load_referenced)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    @property
    def stable_tools(self) -> int:
        """Schemas at the head of ``schemas()`` that the next turn sends again: the loader and the stable names."""
        return 1 + self.stable

    @property
    def kept(self) -> list[str]:
        """The names that stay from this turn on without being called (``grown``)."""
        return self.names[self.stable - self.grown : self.stable]

    def schemas(self) -> list[dict[str, Any]]:
        """The loader first, then the disclosed tools in the order they were disclosed; with
        ``share_preambles``, a tool after the first of its group without the group's shared
        opening (a tool's schema depends only on those before it: the prefix stays put). The
        ``referenced`` ones come last, marked ``defer_loading``."""
        catalog, opened, referenced = self.catalog, set(), set(self.referenced)
        out, deferred = [catalog.loader_schema], []
        for name in self.names:
            entry = catalog.entries[name]
            shorter = catalog.shortened.get(name) if self.share_preambles and entry.group in opened else None
            if name in referenced:  # expanded among the messages: it opens no group of the prefix
                deferred.append({**(shorter or entry.schema), "defer_loading": True})
                continue
            opened.add(entry.group)
            out.append(dict(shorter or entry.schema))
        return out + deferred

    def drop(self, names: Iterable[str]) -> None:
        """Send none of ``names`` after all, where they come after the tools that stay."""
        gone = set(names)
        self.names = self.names[: self.stable] + [name for name in self.names[self.stable :] if name not in gone]

    def without(self, names: Iterable[str]) -> DisclosedTools:
        """A copy that sends none of ``names``, where they come after the tools that stay."""
        copy = dataclasses.replace(self, names=list(self.names), loaded=list(self.loaded), referenced=list(self.referenced))
        copy.drop(names)
        return copy

    def saved(self) -> dict[str, Any]:
        """What a turn that spans requests keeps of its tools between them (the endpoint's
        open turn): everything but the catalog, which each request brings again."""
        return {"names": self.names, "stable": self.stable, "loaded": self.loaded, "share": self.share_preambles,
                "grown": self.grown, "growing": self.growing, "pinned": self.pinned, "ranked": self.ranked,
                "companions": self.companions, "settled": self.settled, "following": self.following,
                "loads": self.loads, "referenced": self.referenced}  # fmt: skip

    @classmethod
    def restored(cls, catalog: Catalog, saved: Mapping[str, Any]) -> DisclosedTools:
        """The tools ``saved`` kept, against this request's ``catalog`` (names it no longer
        holds are left out, and out of the counts of the pinned, stable and grown names they
        were among); ValueError for a record that is not one, or whose counts could not
        describe its names (negative, or more than the names they count)."""
        try:
            names = [str(name) for name in saved["names"]]
            stable, grown, pinned = int(saved["stable"]), int(saved["grown"]), int(saved["pinned"])
            loads = int(saved.get("loads") or 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a saved tool plan of the wrong shape: {type(exc).__name__}") from None
        if not (0 <= pinned <= stable <= len(names) and 0 <= grown <= stable - pinned and loads >= 0):
            counts = ", ".join(f"{name} {capped_count(value)}" for name, value in
                               (("pinned", pinned), ("stable", stable), ("grown", grown), ("loads", loads)))  # fmt: skip
            raise ValueError(
                f"a saved tool plan whose counts do not fit its {len(names)} names: {counts} (expected 0 <= pinned"
                " <= stable <= names, grown <= stable - pinned, loads >= 0)"
            )
        try:
            kept = [name for name in names if name in catalog]

            def left(part: Sequence[str]) -> int:  # the names of ``part`` this catalog still holds
                return sum(1 for name in part if name in catalog)

            return cls(catalog, names=kept, stable=left(names[:stable]), loaded=[str(n) for n in saved["loaded"] if n in kept],
                       share_preambles=bool(saved["share"]), grown=left(names[stable - grown : stable]),
                       growing=bool(saved["growing"]), pinned=left(names[:pinned]),
                       ranked=[str(n) for n in saved["ranked"] if n in catalog],
                       companions=[str(n) for n in saved["companions"] if n in catalog], settled=bool(saved["settled"]),
                       following=[str(n) for n in saved.get("following") or () if n in catalog],
                       loads=loads, referenced=[str(n) for n in saved.get("referenced") or () if n in kept])  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a saved tool plan of the wrong shape: {type(exc).__name__}") from None

    def add(self, names: Iterable[str]) -> list[str]:
        """Disclose ``names`` from the next call on (appended); returns those that were new."""
        new = [name for name in names if name in self.catalog and name not in self.names]
        self.names.extend(new)
        self.loaded.extend(new)
        return new

    def load(
        self, arguments: Any, room: int | None = None, count: Callable[[list[dict[str, Any]]], int] | None = None,
        companions: Companions | None = None,
    ) -> str:  # fmt: skip
        """Run the loader with the model's arguments; the answer it gets (one line). With
        ``room`` (the tokens the prompt's budget has left) and ``count`` (a schema counter),
        the tools whose schemas would not fit stay unloaded, and the answer says so. With
        ``companions`` (given the turn's tools, those usually called with them: ``CoUse``),
        a load that added every tool it asked for adds those usually called with them, not
        sent yet, within what ``room`` leaves: a model that had to ask for a tool is likely
        to need what goes with it (``cd`` before a file operation, a login), and would
        otherwise spend another loader round on it. The turn's second call of the loader, and
        any after it (calls that asked for names: ``loads``), also adds the best matches for
        the message not sent yet (those matched up front that the policy left out, then
        ``following``), within what is left: the model's own choice did not find what it
        needed the first time; and then as many again of the tools usually called with those
        matches or with the turn's own (those it loads, the matches and companions sent up
        front). A load that left a tool it asked for out (no room) adds neither companions
        nor matches: what room is left goes to none of them."""
        return self._load(arguments, room, count, companions)[0]

    def load_referenced(
        self, arguments: Any, room: int | None = None, count: Callable[[list[dict[str, Any]]], int] | None = None,
        companions: Companions | None = None,
    ) -> str | list[dict[str, str]]:  # fmt: skip
        """As ``load``, for a provider that expands a tool reference where an answer holds it
        (Anthropic's ``tool_reference``): where every name asked for was found and loaded,
        the answer references what it loaded, sent deferred (``referenced``) after the rest."""
        text, loaded, clean = self._load(arguments, room, count, companions)
        if not (clean and loaded):
            return text
        self.referenced.extend(loaded)
        return [{"type": "tool_reference", "tool_name": name} for name in loaded]

    def _load(
        self, arguments: Any, room: int | None, count: Callable[[list[dict[str, Any]]], int] | None,
        companions: Companions | None,
    ) -> tuple[str, list[str], bool]:  # fmt: skip
        """``load``'s answer, what it loaded, and whether it has nothing else to say."""
        requested = arguments.get("names") if isinstance(arguments, Mapping) else None
        if isinstance(requested, str):
            requested = [requested]
        if not isinstance(requested, list) or not all(isinstance(n, str) for n in requested):
            return (f'{self.catalog.loader_name} takes {{"names": [tool or group names]}}; see its description for the names.',
                    [], False)  # fmt: skip
        found, unknown = self.catalog.resolve(requested)
        already = [name for name in found if name in self.names]
        searching = self.loads > 0  # this turn called the loader before, and asks again
        self.loads += 1
        new, over, used = self.add_within([name for name in found if name not in already], room, count)
        extra, matched, more = list[str](), list[str](), list[str]()  # more: what goes with the matches

        def within(names: Sequence[str]) -> list[str]:  # add_within passes over what is sent already or not in the catalog
            nonlocal used
            added, _, grown = self.add_within(names, room - used if room is not None else None, count)
            used += grown
            return added

        if new and not over and companions is not None:
            extra = within(list(companions(new, self.names)))
        if searching and not over:
            best = dict.fromkeys([*self.ranked, *self.following])  # a match the policy left out comes first
            # A name this request's catalog lacks (a plan restored against a newer list) takes no place.
            matched = within([name for name in best if name in self.catalog and name not in self.names][
                : max(len(self.ranked), len(self.following))])  # fmt: skip
            if matched and companions is not None:
                turn = [*new, *(name for name in [*self.ranked, *self.companions] if name in self.names)]
                more = within(list(companions([*matched, *turn], self.names)))
        parts = []
        if new:
            parts.append(f"Loaded {_names(new)}: call them in your next step.")
        if extra:
            parts.append(f"Also loaded, as often called with these: {_names(extra)}.")
        if matched:
            parts.append(f"Also loaded, as the next best matches for the user's message: {_names(matched)}"
                         + (f"; and as often called with them: {_names(more)}." if more else "."))  # fmt: skip
        if over:
            parts.append(f"Not loaded, the prompt's token budget has no room for them: {_names(over)}.")
        if already:
            parts.append(f"Already available: {_names(already)}.")
        if unknown:
            parts.append(f"Not found: {_names(unknown)}; the names are in {self.catalog.loader_name}'s description.")
        return " ".join(parts) or "Nothing to load.", [*new, *extra, *matched, *more], not (over or already or unknown)

    def add_within(
        self, names: Sequence[str], room: int | None, count: Callable[[list[dict[str, Any]]], int] | None
    ) -> tuple[list[str], list[str], int]:
        """Add ``names`` in the order given, each whose schema still fits in ``room`` tokens
        (all of them without a room); returns (added, left out, the tokens they added: 0
        without a room)."""
        if room is None or count is None:
            return self.add(names), [], 0
        added, over, start = list[str](), list[str](), count(self.schemas())
        used = 0
        for name in names:
            if not self.add([name]):
                continue
            grown = count(self.schemas()) - start
            if grown > room:
                self.names.pop()
                self.loaded.pop()
                over.append(name)
            else:
                added.append(name)
                used = grown
        return added, over, used

    def unsent(self, name: str, problem: str) -> str:
        """Disclose a known tool the model called without its schema (already added where the
        budget had room), with what to tell the model when its arguments did not fit
        (``problem``)."""
        self.add([name])
        return f"The schema of {listed(name)} had not been sent; it is loaded now ({problem}). Call {listed(name)} again."


def listed(name: str) -> str:
    """A tool or group name as the index and the loader's answers write it: as it is when it is
    a tool name a provider accepts, else quoted and cut short (one line, plainly a value),
    so a name that slipped past the checks where tools enter never adds a line, a group or an
    instruction to the loader's description."""
    return name if is_tool_name(name) else quoted(name, 80)


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(one_line(name, 80) for name in names[:_MAX_ECHO])
    return shown + (f" and {len(names) - _MAX_ECHO} more" if len(names) > _MAX_ECHO else "")
