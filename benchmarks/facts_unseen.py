"""Unseen facts, wordings and filler for the fact-recall benchmark: the headline test set.

Same shapes as FACTS / FILLER / REPLIES in benchmarks/facts.py and
benchmarks/facts_heldout.py, but with entirely new values, statement templates,
questions and filler. Written fresh on 2026-11-26 and frozen before any tuning on it, by
someone who had not seen the middleware's code or its scores. No default may be chosen
on this set; it only measures. About half of FILLER holds incidental specific-looking
tokens (other people's names, shops, brands, weekdays, times, prices, a product code)
that are not facts the user will be asked about.
"""

from __future__ import annotations

__all__ = ["FACTS", "FILLER", "REPLIES"]

# fact: (values, statements, questions); {v} is the value. The first question shares a
# content word with some statement, the second shares none.
FACTS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "name": (
        ["Thandiwe Mokoena", "Joaquín Barrientos", "Saoirse Mulcahy", "Farhan Chowdhury", "Kaito Morishita"],
        [
            "Whatever you draft for the landlord, the reply comes from {v} — that's me.",
            "Ugh, the online form rejected {v} again (too many characters, apparently) so I had to ring them.",
            "For the avoidance of doubt, the applicant is {v}, sole account holder.",
            "(it's {v} on every form, spelled exactly like that please)",
        ],
        ["For the landlord email, how should the sign-off read?", "What should the paperwork say my full name is?"],
    ),
    "city": (
        ["Cluj-Napoca", "Arequipa", "Dunedin", "Kumasi", "Matsumoto"],
        [
            "The council here in {v} wants a permit for basically everything.",
            "It's been raining in {v} for nine days straight, so not much got done.",
            "Any shop you suggest has to deliver to {v}, otherwise forget it.",
            "(We're {v}-based now, after two years renting a couple of hours north.)",
        ],
        ["Which city's council wanted the permit?", "Which town did we end up settling in?"],
    ),
    "order": (
        ["RMA-19034", "CN88240517", "SO-3391-B", "DX7Q-2285", "WRN/60471"],
        [
            "Courier's paperwork says {v} on it, incase the box goes missing again.",
            "The returns desk wrote {v} on a sticky note and told me to hang on to it.",
            "Case number {v}, opened Friday, still no answer.",
            "Warranty claim is filed under {v}; they promised a callback within five working days.",
        ],
        ["What number did the returns desk give me?", "What do I need to quote when I phone them up?"],
    ),
    "budget": (
        ["R95,000", "NZ$27,500", "kr 64,000", "₩21,000,000", "MXN 180,000"],
        [
            "Total spend capped at {v}. Non-negotiable.",
            "I've told everyone involved that our limit is {v}, tax included.",
            "Between savings and a small inheritance we have {v} to play with.",
            "(roughly {v} is what's left after the deposit, so that's all there is)",
        ],
        ["What did I say the spend was capped at?", "How far can we stretch financially before it's a problem?"],
    ),
    "pet": (
        ["Chorizo", "Tofu", "Captain Fluff", "Nala", "Bartholomew"],
        [
            "{v} (the greyhound) needs walking at noon, so there goes my lunch break.",
            "The vet bill for {v} last month ate into everything, honestly.",
            "My parrot {v} has learned to copy my ringtone, which is unsettling.",
            "If anyone comes round, {v} will try to slip out the front door, our little escape artist.",
        ],
        ["Which animal had the big vet bill?", "What's the creature I live with called?"],
    ),
    "partner": (
        ["Matteo", "Aroha", "Olumide", "Hyun-woo", "Esperanza"],
        [
            "{v}, my spouse, is the one who actually reads contracts; I just skim.",
            "Running this past {v} tonight before we commit to anything.",
            "My partner {v} thinks I'm overcomplicating all of it, and may be right.",
            "(Joint account with {v}, so any refunds go there.)",
        ],
        ["Who did I say reads the contracts properly?", "Who am I married to, or as good as?"],
    ),
    "allergy": (
        ["kiwi fruit", "lupin", "sulphites", "pine nuts", "aspirin"],
        [
            "No {v}, please, not even a trace — last time was a hospital trip.",
            "The GP finally confirmed it's {v} that sets me off.",
            "(allergic to {v}, carry antihistamines everywhere)",
            "Mum reminded me today to double-check labels for {v}, as if I'd forget.",
        ],
        ["What did the GP confirm sets me off?", "What's the one substance my body can't cope with?"],
    ),
    "deadline": (
        ["July 17", "9 May", "Sept 28", "January 12th", "Dec 20"],
        [
            "Keys go back on {v}, no ifs or buts.",
            "My sister's wedding is {v}, and I refuse to still be dealing with this then.",
            "(hard stop: {v})",
            "According to the agreement it must be complete on or before {v}.",
        ],
        ["When's my sister's wedding again?", "When does this all have to be wrapped up?"],
    ),
    "project": (
        ["Tidewater", "Zephyr", "Basalt", "Firefly", "Marigold"],
        [
            "{v} went live at work this week and it's been chaos since.",
            "My boss wants a status deck on {v} by Monday, which I have not started.",
            "At the office it's {v} this and {v} that, I'm sick of hearing it.",
            "(Internal name: {v}. External name still undecided.)",
        ],
        ["What's the thing my boss wants a status deck on?", "Which job rollout have I been complaining about?"],
    ),
    "car": (
        ["2014 Honda Jazz", "2021 Tesla Model 3", "2012 Land Rover Defender", "2019 Renault Zoe", "2010 Volkswagen Caddy"],
        [
            "The {v} has a roof box now, which helps with bulky stuff.",
            "Our {v} only just passed its MOT, so long drives make me nervous.",
            "It's a {v}, before you ask, and no, it's not fast.",
            "Parking the {v} on this street is a nightmare after six.",
        ],
        ["Which car got the roof box?", "What vehicle do we own, model and year?"],
    ),
}

FILLER = [
    # with incidental specific-looking tokens that are not asked about
    "Lidl had something for {thing} in the middle aisle for €24.99, gone by Thursday of course.",
    "Magda from upstairs knocked at 7:15 about the noise, then stayed forty minutes talking about {thing}.",
    "A channel called Sharma DIY explained {thing} better than anything else I found.",
    "The Bunnings by the ring road shuts at 5:30 on Saturdays, so {thing} slipped again.",
    "Item 44-A-908 turned out to be the wrong size; nothing to do with {thing}, but it cost me a morning.",
    "Uncle Femi rang from Lagos wanting an update on {thing}, as if I had one.",
    "I paid ₱1,200 for a consultation that mostly repeated what I'd read about {thing}.",
    "Trying the Notion template Kenji shared for {thing}; so far it's just more boxes to tick.",
    "On Wednesday the guy at Decathlon told me {thing} is 'easy', which I doubt.",
    "Spent $18.40 at Home Depot on bits for {thing} and still forgot the one thing I went in for.",
    "Between 10 and 11 tonight is the only quiet window I have for {thing}.",
    "An episode of 99% Invisible touched on {thing}, weirdly enough.",
    "Room 2B at the library is mine on Friday afternoons, so that's where {thing} happens now.",
    # plain
    "No big update on {thing}, just slow grinding progress.",
    "What would a sensible person do about {thing} with limited time?",
    "I half-remember reading something useful on {thing}, but can't find it now.",
    "Me again about {thing}, sorry, it's the bit I least understand.",
    "Would you tackle {thing} early, or leave it to the end when there's less to lose?",
    "Honestly the hardest part of {thing} is just starting.",
    "I got about half of {thing} sorted before running out of energy.",
    "There's probably a cheaper way to do {thing} that I'm missing.",
    "Can we go slower on {thing}? I lost the thread a bit last time.",
    "Everyone has an opinion about {thing} and none of them match mine.",
    "I think {thing} deserves a proper afternoon instead of ten minutes here and there.",
]

REPLIES = [
    "Right. Try writing down what 'done' looks like for {thing}, then work backwards.",
    "Reasonable. I'd get one expert opinion on {thing} and stop researching after that.",
    "That's fair. Pick the smallest next action on {thing} and do it today.",
    "Okay. If {thing} is blocking other work, it goes first; otherwise it can wait.",
]
