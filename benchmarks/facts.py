"""Tool-free conversations: a user states facts about themselves and their task in long
ordinary messages, and asks about them 20 to 100 turns later.

No public set of this kind ships in a package registry (LoCoMo and LongMemEval live on
GitHub and Hugging Face, which this machine does not reach), so the set is built here,
deterministically (``conversations(seed)``), and described in BENCHMARKS.md. Each
conversation plays one long task (a renovation, a move, a trip, a thesis...) over 24 to
109 turns of messages of 40 to 120 words; 6 to 10 facts (a name, a city, an order
number, a budget, a pet, a date...) are stated inside them, each in one of several
wordings; later a question asks for each, worded so that about half share no content
word with the statement ("Where am I based these days?" for "we moved to Tampere").

Measured per question: is the answer in the composed prompt (the question itself never
holds it), among questions whose answer the full history holds (all of them here); and
the tokens of every turn's prompt against the full history and a window of the last 10
messages.
"""

from __future__ import annotations

import importlib
import random
import statistics
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from middleware import Config, SessionManager
from middleware.core.composer import Composer
from middleware.core.lexical import terms
from middleware.core.state import compact_json

__all__ = ["Conversation", "conversations", "measure"]

# fact: (values, statements, questions); {v} is the value. Half the questions share a
# content word with a statement, half do not.
FACTS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "name": (
        ["Dana Whitfield", "Marco Ilves", "Priya Raman", "Tomasz Wierzba", "Aiko Tanabe", "Lena Okafor"],
        [
            "Oh, and since we'll be talking a lot: my name is {v}, in case you need it for any of the letters.",
            "I should introduce myself properly, I'm {v} and I've been putting this off for far too long.",
        ],
        ["What's my full name again, for the letter?", "How should you address me in the email you draft?"],
    ),
    "city": (
        ["Tampere", "Valparaíso", "Kraków", "Lisbon", "Ljubljana", "Hobart"],
        [
            "We moved to {v} about a year ago, so everything is still a bit new to us.",
            "Living in {v} means the winters are long, which matters for the schedule.",
        ],
        ["Which city did I tell you we moved to?", "Where am I based these days?"],
    ),
    "order": (
        ["A-48213", "ZX-90417", "ORD-55610", "KT-20388", "B-77125"],
        [
            "The supplier gave me order number {v} for the tiles, and they said to quote it on every call.",
            "For reference the tracking reference they sent is {v}, I'll need it if they mess up the delivery.",
        ],
        ["What was the order number for the tiles?", "Which reference should I quote when I call them?"],
    ),
    "budget": (
        ["$2,400", "€18,500", "£6,750", "$31,000", "€4,200"],
        [
            "We agreed that the whole thing cannot go over {v}, my partner was very firm about that.",
            "Our ceiling for this is {v}, and honestly I'd like to stay well under it.",
        ],
        ["What budget limit did we agree on?", "How much can we spend at most?"],
    ),
    "pet": (
        ["Biscuit", "Pixel", "Mochi", "Ragnar", "Olive"],
        [
            "Our dog {v} gets anxious with strangers, so the workers need to know he's around.",
            "I have a cat called {v} who will hide under the bed the whole time, which is fine.",
        ],
        ["What's my pet's name?", "Who needs to be kept away from the workers?"],
    ),
    "partner": (
        ["Ingrid", "Sami", "Noor", "Kristof", "Beatriz"],
        [
            "My wife {v} handles the money side, so anything about payments should go through her.",
            "My husband {v} will sign the contract because he's the one on the deed.",
        ],
        ["Who handles payments in our household?", "Who is going to sign the contract?"],
    ),
    "allergy": (
        ["peanuts", "shellfish", "latex", "penicillin", "sesame"],
        [
            "One important thing: I'm seriously allergic to {v}, so keep that in mind for anything you suggest.",
            "I react badly to {v}, even small amounts, which has caused trouble before.",
        ],
        ["What am I allergic to?", "What should you keep away from me, health-wise?"],
    ),
    "deadline": (
        ["March 14", "June 3", "September 21", "November 8", "January 30"],
        [
            "Everything has to be finished by {v}, because that's when my parents arrive.",
            "The hard deadline is {v}; after that the landlord starts charging us.",
        ],
        ["What's the deadline I mentioned?", "By when does all of this have to be done?"],
    ),
    "project": (
        ["Heron", "Bluestone", "Copperleaf", "Nightjar", "Orchard"],
        [
            "At work we call this kind of thing Project {v}, so if I slip and say that, that's what I mean.",
            "My manager named the initiative {v}, which nobody likes but it stuck.",
        ],
        ["What's the project called at my work?", "What name did my manager give the initiative?"],
    ),
    "car": (
        ["2019 Subaru Outback", "2021 Skoda Octavia", "2016 Volvo V60", "2022 Kia Niro"],
        [
            "We'll be hauling the materials in our {v}, so keep the loads to what fits in it.",
            "I drive a {v} and it's the only vehicle we have for this.",
        ],
        ["Which car do we have?", "What vehicle will carry the materials?"],
    ),
}

TASKS = [
    ("renovating our kitchen", ["cabinets", "tiles", "plumbing", "electrician", "countertop", "lighting", "flooring"]),
    ("moving to a new flat", ["boxes", "movers", "lease", "utilities", "furniture", "address change", "cleaning"]),
    ("planning a three-week trip", ["flights", "hotels", "visas", "itinerary", "insurance", "packing", "trains"]),
    ("finishing my thesis", ["chapters", "references", "supervisor", "figures", "defence", "formatting", "data"]),
    ("starting a vegetable garden", ["beds", "soil", "seeds", "watering", "compost", "fencing", "seedlings"]),
]
FILLER = [
    "I've been thinking more about the {thing} and I'm not sure whether we should do it ourselves or pay someone.",
    "Yesterday I spent most of the evening reading about {thing}, and every source seems to say something different.",
    "My neighbour had a similar experience with {thing} and it took twice as long as they planned.",
    "Could you help me think through the order of things, especially where {thing} fits in?",
    "I keep changing my mind about {thing}, which is making the rest of the plan harder to settle.",
    "There was a long queue at the shop today, so I didn't get to ask them about {thing} at all.",
    "Part of me wants to keep it simple, but the other part wants to get {thing} right the first time.",
    "I made a list of questions about {thing} but I suspect half of them are not the important ones.",
    "The weather has been awful, which slowed everything down, including {thing}.",
    "I'm worried we underestimated how much time {thing} will take on weekends only.",
    "A friend recommended a video series about {thing}; I watched two episodes and fell asleep.",
    "If you were in my position, what would you prioritise this week, given {thing} is still open?",
]
REPLIES = [
    "That makes sense. I'd settle {thing} first, since the rest depends on it.",
    "Good question. For {thing}, compare two or three quotes before deciding.",
    "I'd keep {thing} simple for now and revisit it once the bigger pieces are in place.",
    "Noted. Let's put {thing} on the list for this week and check progress next time.",
]


@dataclass
class Turn:
    user: str
    reply: str
    answer: str = ""  # for a question: the value the prompt must hold
    told: str = ""  # for a question: the statement that told its answer


@dataclass
class Conversation:
    id: str
    task: str
    turns: list[Turn] = field(default_factory=list)


def _filler(rng: random.Random, things: Sequence[str], sentences: int, filler: Sequence[str] = FILLER) -> str:
    return " ".join(rng.choice(filler).format(thing=rng.choice(things)) for _ in range(sentences))


WORDINGS = ("first", "heldout", "unseen")  # this module's; benchmarks.facts_heldout's; benchmarks.facts_unseen's


def conversations(count: int = 40, seed: int = 2026, *, wording: str = "first") -> list[Conversation]:
    """``count`` conversations, the same every time for a seed, with one of ``WORDINGS``:
    this module's facts and filler (``first``: the set recall's defaults were chosen on);
    ``heldout``, the wordings of ``benchmarks.facts_heldout`` (other values, statements,
    questions and filler, half of it with names, times and prices in passing), written
    without sight of the rules that find what a user states, which fed a rejected variant;
    or ``unseen``, the frozen set of ``benchmarks.facts_unseen``, which nothing was chosen on."""
    if wording not in WORDINGS:
        raise ValueError(f"wording {wording[:40]!r}: expected one of {', '.join(WORDINGS)}")
    facts, filler, replies = FACTS, FILLER, REPLIES
    if wording != "first":
        words = importlib.import_module(f"benchmarks.facts_{wording}")
        facts, filler, replies = words.FACTS, words.FILLER, words.REPLIES
    rng = random.Random(seed)
    made = []
    for index in range(count):
        task, things = TASKS[index % len(TASKS)]
        length = rng.randint(24, 109)
        kinds = rng.sample(sorted(facts), k=min(rng.randint(6, 10), len(facts)))
        plan: dict[int, tuple[str, str, str]] = {}  # turn -> (kind, statement or question, answer)
        told: dict[int, str] = {}  # a question's turn -> the statement that told its answer
        for kind in kinds:
            values, statements, questions = facts[kind]
            value = rng.choice(values)
            for _ in range(50):  # a statement turn and a question 20..100 turns later, both free
                said = rng.randint(0, max(length - 21, 0))
                asked = said + rng.randint(20, 100)
                if asked < length and said not in plan and asked not in plan:
                    plan[said] = (kind, rng.choice(statements).format(v=value), "")
                    plan[asked] = (kind, rng.choice(questions), value)
                    told[asked] = plan[said][1]
                    break
        conversation = Conversation(f"facts-{index}", task)
        for number in range(length):
            thing = rng.choice(things)
            kind, text, answer = plan.get(number, ("", "", ""))
            opening = f"Still working on {task}." if number == 0 else ""
            if answer:  # a question, asked on its own
                user = text
            else:
                before = _filler(rng, things, rng.randint(1, 3), filler)
                after = _filler(rng, things, rng.randint(1, 3), filler)
                user = " ".join(part for part in (opening, before, text, after) if part)
            conversation.turns.append(Turn(user, rng.choice(replies).format(thing=thing), answer, told.get(number, "")))
        made.append(conversation)
    return made


# --- measuring ------------------------------------------------------------------------------


def word_reach(sets: Sequence[Conversation]) -> float:
    """The share of questions that share a word (an index term: ``lexical.terms``) with the
    statement that told their answer: what any recall that selects pieces by the question's
    words can find at most, whatever its ranking and budget."""
    questions = [turn for conversation in sets for turn in conversation.turns if turn.answer]
    shared = sum(not set(terms(turn.user)).isdisjoint(terms(turn.told)) for turn in questions)
    return shared / len(questions) if questions else 0.0


@dataclass
class Result:
    label: str
    tokens: list[int] = field(default_factory=list)
    questions: int = 0
    answered: int = 0
    reached: int = 0  # the answer in the prompt or among the candidates the store sent back
    by_position: dict[int, list[int]] = field(default_factory=dict)
    windows: int = 0  # recalled lines a neighbouring sentence joined (sentence windows)
    window_tokens: int = 0  # the tokens those neighbours added
    by_neighbour: int = 0  # questions answered, whose answer the prompt holds only in a neighbour


@dataclass
class Seen:
    """What recall was given and what it added on one build: the text of every archived
    piece the store handed the composer to rank (whatever ranking and budget then keep, an
    answer outside them cannot be recalled: the candidate ceiling), and the neighbouring
    sentences recalled lines were given (sentence windows), with the tokens they added."""

    candidates: list[str] = field(default_factory=list)
    neighbours: list[str] = field(default_factory=list)
    neighbour_tokens: int = 0

    def clear(self) -> None:
        self.candidates.clear()
        self.neighbours.clear()
        self.neighbour_tokens = 0


@contextmanager
def candidate_texts() -> Iterator[Seen]:
    """What recall was given and added while this is open (see ``Seen``)."""
    found = Seen()
    recall = Composer.recall

    def seen(self: Composer, state: Any, current: str, candidates: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        found.candidates.extend(c.text for c in candidates)
        recalled = recall(self, state, current, candidates, *args, **kwargs)
        for item in recalled:
            if item.plain is not None:  # a window: the matched sentence (``plain``) and its neighbours
                found.neighbours += [part.strip() for part in item.text.split(item.plain.text, 1) if part.strip()]
                found.neighbour_tokens += item.tokens - item.plain.tokens
        return recalled

    Composer.recall = seen  # type: ignore[method-assign]
    try:
        yield found
    finally:
        Composer.recall = recall  # type: ignore[method-assign]


def measure(
    sets: Sequence[Conversation],
    config: Config,
    variants: dict[str, dict[str, Any]],
    *,
    progress: Callable[[int], None] = lambda n: None,
) -> dict[str, Result]:
    """Play every conversation through the full history, the last 10 messages, the last
    exchange alone (the middleware's recent window with nothing else: what its window costs)
    and each middleware variant (``memory`` settings by name); tokens counted the same way for all."""
    counter = SessionManager(config).tokenizer.count_messages
    results = {name: Result(name) for name in ("full history", "last 10 messages", "last exchange only", *variants)}
    # Each variant keeps its sessions apart: its own key prefix on the store the config names.
    managers = {name: SessionManager(config.with_overrides(memory=settings, store={"key_prefix": f"f{uuid.uuid4().hex[:10]}"}))
                for name, settings in variants.items()}  # fmt: skip
    system = {"role": "system", "content": "You are a helpful assistant."}
    with candidate_texts() as found:
        for conversation in sets:
            history: list[dict[str, str]] = []
            for position, turn in enumerate(conversation.turns, start=1):
                current = {"role": "user", "content": turn.user}
                prompts = {"full history": [system, *history, current], "last 10 messages": [system, *history[-10:], current],
                           "last exchange only": [system, *history[-2:], current]}  # fmt: skip
                candidates: dict[str, list[str]] = {}
                neighbours: dict[str, list[str]] = {}
                for name, mgr in managers.items():
                    found.clear()
                    prompts[name] = mgr.build_messages(conversation.id, turn.user)
                    candidates[name], neighbours[name] = list(found.candidates), list(found.neighbours)
                    results[name].windows += len(found.neighbours)
                    results[name].window_tokens += found.neighbour_tokens
                for name, messages in prompts.items():
                    result = results[name]
                    tokens = counter(messages)
                    result.tokens.append(tokens)
                    result.by_position.setdefault(position, []).append(tokens)
                    if turn.answer:
                        result.questions += 1
                        answered = any(turn.answer in m["content"] for m in messages)
                        result.answered += answered
                        result.reached += answered or any(turn.answer in text for text in candidates.get(name, ()))
                        if answered and neighbours.get(name):  # answered only by a neighbour: gone without it
                            result.by_neighbour += not any(
                                turn.answer in _without(m["content"], neighbours[name]) for m in messages
                            )
                for mgr in managers.values():
                    mgr.record_turn(conversation.id, user=turn.user, assistant=turn.reply)
                history += [current, {"role": "assistant", "content": turn.reply}]
                progress(1)
    for mgr in managers.values():
        mgr.close()
    return results


def _without(text: str, parts: Sequence[str]) -> str:
    """``text`` without ``parts``, as written or as the recall block quotes them."""
    for part in parts:
        text = text.replace(part, "").replace(compact_json(part)[1:-1], "")
    return text


def rows(results: dict[str, Result]) -> list[dict[str, Any]]:
    full = sum(results["full history"].tokens)
    out = []
    for name, result in results.items():
        at = {p: statistics.mean(v) for p, v in result.by_position.items()}
        out.append({
            "strategy": name, "tokens": sum(result.tokens), "median": statistics.median(result.tokens),
            "reduction": 1 - sum(result.tokens) / full, "answered": result.answered / result.questions,
            "reached": result.reached / result.questions,
            "questions": result.questions, "turn20": at.get(20, 0.0), "turn100": at.get(100, 0.0),
            "windows": result.windows, "window_tokens": result.window_tokens, "by_neighbour": result.by_neighbour,
        })  # fmt: skip
    return out
