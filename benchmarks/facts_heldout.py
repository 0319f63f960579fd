"""Held-out facts, wordings and filler for the fact-recall benchmark.

Same shapes as FACTS / FILLER / REPLIES in benchmarks/facts.py, but with entirely new
values, statement templates, questions and filler, so that a heuristic tuned on facts.py
can be tested on wordings it has not seen. About half of FILLER holds incidental
specific-looking tokens (brands, shops, weekdays, times, prices, a colleague's name)
that are not facts the user will be asked about.
"""

from __future__ import annotations

__all__ = ["FACTS", "FILLER", "REPLIES"]

# fact: (values, statements, questions); {v} is the value. The first question shares a
# content word with some statement, the second shares none.
FACTS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "name": (
        ["Rosalind Achebe", "Henrik Lindqvist", "Mei-Ling Zhou", "Oluwaseun Adeyemi", "Gabriel Fontaine"],
        [
            "Sign anything you draft as {v}, by the way, that's me.",
            "(For the record it's {v} on my passport, the bank kept misspelling it.)",
            "Quick intro since I never did one: {v}, forty-something, hopelessly disorganised.",
            "The letters from the council all come addressed to {v}, which is me, so don't be thrown if I paste one in.",
        ],
        ["What name should go at the bottom of the letters?", "Remind me, who did I say I was?"],
    ),
    "city": (
        ["Bergen", "Da Nang", "Mendoza", "Thessaloniki", "Winnipeg"],
        [
            "Btw the kids' school is in {v}, so anything local has to be near there.",
            "Flat prices in {v} have gone mad this year, which is partly why we're doing this.",
            "Everything here shuts at six on a Sunday, that's {v} for you.",
            "Since relocating to {v} last spring I still haven't found a decent hardware shop.",
        ],
        ["Which city did I say the kids' school was in?", "Where do we live now?"],
    ),
    "order": (
        ["INV-30982", "RX-7714-Q", "PO-66120", "#448102", "TK-05539"],
        [
            "Quick note — the reference on the invoice is {v}.",
            "Their confirmation email (ref {v}) still says 'processing', which is ridiculous.",
            "{v} is what I was told to quote if the courier turns up without the parts.",
            "The delivery was booked under {v}, apparently, though nobody at the depot could find it.",
        ],
        ["What was the reference on the invoice?", "Which code do I give the supplier when I ring them?"],
    ),
    "budget": (
        ["¥450,000", "CHF 9,800", "A$12,300", "₹350,000", "15,000 zł"],
        [
            "We've got {v} set aside for all of it, and not a penny more.",
            "My dad lent us a bit, so the total pot is now {v}.",
            "Anything over {v} and we'd have to remortgage, basically.",
            "The bank approved {v} (less than we hoped, but still).",
        ],
        ["How much money is in the pot altogether?", "What's the most we can afford to spend?"],
    ),
    "pet": (
        ["Pepper", "Mr. Noodles", "Bramble", "Socks", "Waffles"],
        [
            "Also the kids' rabbit, {v}, chewed through another cable last night, so that's fun.",
            "Btw we'll have to take {v} to the kennel while the floors are done, he barks at anything that moves.",
            "Our old tabby {v} is nineteen now and mostly sleeps by the radiator.",
            "(Sorry if I'm slow to reply — {v} the cat has decided my keyboard is a bed.)",
        ],
        ["Which animal did I say goes to the kennel?", "What's our furry friend called?"],
    ),
    "partner": (
        ["Rafael", "Yuki", "Siobhan", "Dev", "Annika"],
        [
            "{v} and I disagree on the colour scheme, as usual.",
            "My girlfriend {v} is doing the spreadsheets because I can't be trusted with them.",
            "Btw anything that needs a signature goes to {v} — it's her name on the mortgage.",
            "We (me and my other half, {v}) finally sat down and went through it all on Sunday.",
        ],
        ["Whose name is on the mortgage?", "Who's the person I share my home with?"],
    ),
    "allergy": (
        ["walnuts", "mustard", "strawberries", "celery", "buckwheat"],
        [
            "No {v} in anything please, I end up in A&E otherwise.",
            "(I carry an EpiPen because of {v}, just so you know.)",
            "Btw the kids and I both have to avoid {v}, it runs in the family.",
            "Last time someone brought {v} round I had a reaction within minutes.",
        ],
        ["What do the kids and I have to avoid?", "Which food makes me ill?"],
    ),
    "deadline": (
        ["April 2", "19 August", "October 11", "December 5th", "February 27"],
        [
            "The inspector is booked for {v}, so everything needs to be ready by then.",
            "Our lease ends {v} — no extensions, the agent was clear.",
            "By {v} it all has to be wrapped up, otherwise the grant lapses.",
            "My in-laws land on {v} and I'd rather they didn't walk into a mess.",
        ],
        ["When is the inspector coming?", "What's the cut-off for finishing?"],
    ),
    "project": (
        ["Kestrel", "Greenline", "Atlas Bridge", "Moonwalk", "Saffron"],
        [
            "Work's a nightmare this week because of {v}, our big migration thing.",
            "(Project {v} — don't ask, the name was chosen by committee.)",
            "Btw if I mention {v}, that's the rollout at the office, not this.",
            "The team's codename for it is {v}, and it's eating all my evenings.",
        ],
        ["What's the codename of that work thing?", "Which initiative at my job keeps me busy?"],
    ),
    "car": (
        ["2018 Toyota RAV4", "2020 Mazda CX-5", "2015 Ford Transit", "2023 Hyundai Ioniq 5", "2017 Peugeot 308"],
        [
            "Everything has to fit in the back of a {v}, so no giant flat-packs.",
            "My {v} is in the garage again (third time this year).",
            "The shopping came home in the boot of the {v}, very slowly.",
            "We borrowed a trailer for the {v}, but the hitch is a pain.",
        ],
        ["Which car is in the garage?", "What do I drive?"],
    ),
}

FILLER = [
    # with incidental specific-looking tokens that are not asked about
    "I saw a This Old House episode about {thing} on Tuesday night and now I'm second-guessing everything.",
    "Went to B&Q at 8:30 this morning and the guy in the {thing} section had no idea either.",
    "My brother-in-law in Glasgow says he did {thing} himself back in 2014 and regretted it.",
    "I spent £40 on a book about {thing} from Waterstones; about three pages were useful.",
    "I've got a call at 3pm on Thursday, so I'll only have an hour for {thing} today.",
    "Someone on Reddit posted a 12-step guide to {thing}, which seems like overkill.",
    "We watched Grand Designs on Sunday and I kept pausing it to look at how they handled {thing}.",
    "The Amazon reviews for anything related to {thing} are either five stars or one, nothing in between.",
    "I'm out Monday and Wednesday for work, so {thing} will have to wait until the weekend.",
    "My colleague Tom swears {thing} takes 20 minutes; it took me nearly two hours.",
    "Costco had a deal on stuff for {thing}, 2 for $35, but I didn't trust it.",
    "Last October we tried {thing} once before and gave up after a week.",
    "Got an email from IKEA Family about a sale, which reminded me about {thing}.",
    # plain
    "Honestly I just want {thing} to stop being the thing I think about before bed.",
    "Is it normal that {thing} is taking longer than everything else combined?",
    "I wrote a few notes on {thing} but they're scattered across three apps now.",
    "Not sure if I'm overthinking {thing} or underthinking it, hard to tell at this point.",
    "Anyway, back to {thing}, because I got a bit sidetracked there.",
    "It feels like every decision about {thing} opens up two more decisions.",
    "I'd love a rough checklist for {thing} if you have one in mind.",
    "Sorry for the long message, I've had {thing} on my mind all day.",
    "We had a small argument about {thing} over dinner, nothing serious.",
    "Maybe I should just accept that {thing} won't be perfect.",
    "The good news is that {thing} looks a bit less scary than it did last week.",
]

REPLIES = [
    "Understood. Let's break {thing} into smaller steps so it feels less overwhelming.",
    "That's a common worry. With {thing}, a short test run usually tells you most of what you need.",
    "Fair enough. I'd park {thing} for a few days and come back to it with fresh eyes.",
    "Sounds like progress. Once {thing} is settled, the next steps should fall into place.",
]
