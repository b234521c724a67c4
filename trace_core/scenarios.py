"""The five TRACE stress scenarios.

    python -m trace_core.scenarios [NAME ...] [--judge llm|embedding|auto] [--base-url URL --model NAME]

Each scenario builds a tree, asks what it asks, prints the tree and a verdict.
Names: needle, overwrite, drift, theseus, multihop.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from .synthesizer import PromptSynthesizer
from .tree import CTree

# (topic label, user, assistant): label is ground truth for tests and the scripted judge
Exchange = tuple[str, str, str]

FILLER: dict[str, list[tuple[str, str]]] = {
    "sourdough": [
        ("How do I start a sourdough starter?", "Mix equal weights of flour and water and feed it daily for a week."),
        ("My sourdough starter smells like acetone.", "It is hungry: feed it more often or at a higher ratio."),
        ("What hydration should my sourdough loaf have?", "Start around 70 percent hydration for an open crumb."),
        ("How long should sourdough bulk fermentation last?", "Four to six hours at room temperature, until it grows by half."),
    ],
    "marathon": [
        ("I'm training for my first marathon in October.", "Build weekly mileage gradually, no more than ten percent a week."),
        ("What's a good long run pace for marathon training?", "About a minute per kilometre slower than race pace."),
        ("How should I taper before the marathon?", "Cut volume over the final two to three weeks but keep some speed."),
        ("What should I eat the night before the marathon?", "A familiar carbohydrate-rich dinner like pasta or rice."),
    ],
    "kubernetes": [
        ("How do I roll back a Kubernetes deployment?", "Use kubectl rollout undo deployment/NAME."),
        ("Why is my Kubernetes pod stuck in CrashLoopBackOff?", "Check kubectl logs --previous and the container's exit code."),
        ("How do Kubernetes liveness probes work?", "The kubelet restarts a container whose liveness probe keeps failing."),
        ("Should I set CPU limits on Kubernetes pods?", "Set requests always; limits on CPU often cause throttling."),
    ],
    "gardening": [
        ("When should I plant tomato seedlings outside?", "After the last frost, when nights stay above ten degrees."),
        ("My tomato leaves have yellow spots.", "Likely early blight: remove affected leaves and water at the base."),
        ("How often should I water tomatoes in July?", "Deeply two or three times a week rather than a little daily."),
        ("Should I prune tomato suckers?", "On indeterminate varieties, pinching suckers improves airflow."),
    ],
    "jazz": [
        ("Who should I listen to first to get into jazz?", "Start with Miles Davis's Kind of Blue and Coltrane's Blue Train."),
        ("What makes bebop different from swing?", "Faster tempos, complex harmony and improvisation for listening."),
        ("Recommend a jazz pianist.", "Bill Evans, especially Sunday at the Village Vanguard."),
        ("What's a jazz standard I could learn on guitar?", "Autumn Leaves is a classic first standard."),
    ],
    "taxes": [
        ("When is the deadline for filing my income tax return?", "Usually mid-April, unless you file for an extension."),
        ("Can I deduct my home office?", "If it is used regularly and exclusively for work, often yes."),
        ("What records should I keep for taxes?", "Receipts, invoices and bank statements for at least seven years."),
        ("Do I pay tax on my savings interest?", "Interest is generally taxable income above any allowance."),
    ],
}


def filler(n: int, start: int = 0) -> list[Exchange]:
    """``n`` exchanges cycling through the filler topics, a few exchanges per topic."""
    labels = list(FILLER)
    out: list[Exchange] = []
    k = start
    while len(out) < n:
        label = labels[k % len(labels)]
        for u, a in FILLER[label]:
            if len(out) < n:
                out.append((label, f"{u} (#{len(out) + start})", a))
        k += 1
    return out


_FILLER_NUMBER = re.compile(r" \(#\d+\)$")


def numbered(talk: list[Exchange]) -> list[Exchange]:
    """The talk with each filler exchange numbered by its place in it: "(#12)" is the
    tree's #12 (filler numbers its own list, so after a scenario's own exchanges they
    were off by one or more)."""
    return [(label, f"{_FILLER_NUMBER.sub('', u)} (#{i})", a) if label in FILLER else (label, u, a)
            for i, (label, u, a) in enumerate(talk)]


@dataclass
class Verdict:
    name: str
    passed: bool
    detail: str
    tree: CTree | None = field(default=None, repr=False)
    prompt: str = ""


def _tree(judge: str, base_url: str | None, model: str | None, embed_fn, path: str | None, llm_judge=None) -> CTree:
    kwargs = dict(judge=judge, base_url=base_url, embed_fn=embed_fn, llm_timeout=60, llm_judge=llm_judge)
    if model:
        kwargs["model"] = model
    if path:
        return CTree.open(path, **kwargs)
    return CTree(**kwargs)


def _day(i: int) -> str:
    """The scenarios' date of exchange ``i``: a day each, from 2024-01-01."""
    return f"2024-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T10:00:00"


def _add_all(tree: CTree, talk: list[Exchange]) -> None:
    for i, (_label, u, a) in enumerate(talk):
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}], timestamp=_day(i))


def _prompt(tree: CTree, query: str) -> tuple[str, PromptSynthesizer]:
    synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb)
    return synth.synthesize_prompt(query, tree.embed_fn.embed(query), tree.current_node, []), synth


# --- the scenarios -----------------------------------------------------------------------

NEEDLE = ("needle", "Important: I'm severely allergic to shellfish, so never suggest shrimp, crab or lobster.",
          "Understood. I will never suggest shellfish such as shrimp, crab or lobster.")


def needle_talk(total: int = 200) -> list[Exchange]:
    talk = filler(total - 1)
    return numbered(talk[:9] + [NEEDLE] + talk[9:])


def needle(tree: CTree) -> Verdict:
    _add_all(tree, needle_talk())
    prompt, _ = _prompt(tree, "I'm hosting a dinner party: can you suggest a seafood main course?")
    ok = "allergic to shellfish" in prompt
    return Verdict("needle", ok, "the constraint of #9 (the 10th exchange) " + ("reached" if ok else "did NOT reach")
                   + " the prompt for a related question after 200 exchanges", tree, prompt)


OVERWRITE_OLD = ("sarah", "My niece Sarah is allergic to peanuts.", "Noted: Sarah must avoid peanuts.")
OVERWRITE_NEW = ("sarah", "Actually, Sarah's allergy test came back negative: Sarah can eat peanuts now.",
                 "Great news: Sarah is no longer allergic to peanuts.")


def overwrite_talk() -> list[Exchange]:
    return numbered([OVERWRITE_OLD] + filler(12) + [OVERWRITE_NEW] + filler(4, start=3))


def overwrite(tree: CTree) -> Verdict:
    _add_all(tree, overwrite_talk())
    prompt, synth = _prompt(tree, "Can I bake Sarah a peanut butter cookie?")
    lines = [line for line in prompt.splitlines() if line.startswith("- ")]
    new = [line for line in lines if "came back negative" in line]
    old = [line for line in lines if "is allergic to peanuts" in line]
    ok = bool(new) and "[current]" in new[0] and (not old or "[superseded]" in old[0])
    return Verdict("overwrite", ok, "the newer fact is " + ("presented as current" if ok else "NOT marked current")
                   + (", the older as superseded" if old and "[superseded]" in old[0] else ""), tree, prompt)


SNAKE = [
    ("snake", "My ball python hasn't eaten in three weeks.", "Ball pythons often fast in winter; check temperatures."),
    ("snake", "What temperature should my python's enclosure be?", "A warm side near 32 °C and a cool side near 25 °C."),
    ("snake", "My python is shedding in pieces.", "Raise the humidity to help a complete shed."),
]
LANGUAGE = [
    ("code", "My Python script raises a KeyError on a dict lookup.", "Use dict.get() or check the key with 'in' first."),
    ("code", "How do I read a CSV file in Python?", "Use the csv module or pandas.read_csv."),
    ("code", "What's a Python list comprehension?", "A compact way to build lists: [x * 2 for x in items]."),
]


# the exchange that moves the conversation on, so the scenario's last topic freezes before the reorganisation
CLOSING = {"drift": ("Let's talk about something else: jazz records.", "Sure, what do you like?"),
           "theseus": ("Unrelated: what's the capital of Australia?", "Canberra.")}


def _close(tree: CTree, name: str) -> None:
    user, assistant = CLOSING[name]
    # the day after the talk's last (it was dated today, after a year of 2024: a trial)
    tree.add([{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
             timestamp=_day(len(tree.exchanges)))


def drift_talk() -> list[Exchange]:
    # the two senses come back later in separate branches, so a merge is tempting
    return numbered(SNAKE + filler(6) + LANGUAGE + filler(6, start=2) + SNAKE[:2] + filler(4, start=4)
                    + LANGUAGE[:2])


def drift(tree: CTree) -> Verdict:
    _add_all(tree, drift_talk())
    _close(tree, "drift")
    res = tree.reorganize(similarity_threshold=0.55)
    # a topic holding exchanges of both senses directly means a merge joined them
    # (grouping topics under a common ancestor for fan-out is not a merge)
    mixed = [t.topic_name for t in tree.iter_topics() if t is not tree.root and
             {"snake", "code"} <= _direct_labels(t, drift_talk())]
    ok = not mixed
    return Verdict("drift", ok, f"{res['merged']} merged, {res['vetoed']} vetoed; snake and language "
                   + ("kept apart" if ok else f"MERGED in {mixed}"), tree)


def _direct_labels(topic, talk: list[Exchange]) -> set[str]:
    return {talk[m.index][0] for m in topic.message_children if m.index < len(talk)}


def _purity(topic, talk: list[Exchange], label: str) -> float:
    xs = [m for m in topic.iter_messages() if m.index < len(talk)]
    return sum(talk[m.index][0] == label for m in xs) / max(len(xs), 1)


THESEUS_PARTS = [
    ("Eleanor, my 1967 Ford Mustang, needs new brake pads.", "Classic Mustang brakes: get drum or disc pads for a '67."),
    ("I repainted Eleanor, my 1967 Mustang, in highland green.", "Highland green suits a '67 Mustang."),
    ("Eleanor the Mustang has an oil leak from the rear main seal.", "A rear main seal leak on a '67 Mustang needs the transmission out."),
    ("Which tires fit Eleanor, my 1967 Mustang fastback?", "Period-correct 14-inch or 15-inch wheels with radial tires."),
    ("Eleanor's 289 V8 engine in my Mustang is misfiring.", "Check the plugs, wires and distributor cap on the 289."),
    ("I'm restoring the interior of Eleanor, my 1967 Mustang.", "Reproduction seat covers for a '67 Mustang are easy to find."),
    ("Eleanor the Mustang needs a new carburetor.", "A 600 cfm four-barrel suits a '67 Mustang's 289."),
    ("The radiator on Eleanor, my 1967 Mustang, is overheating.", "Flush it and consider an aluminium radiator for the Mustang."),
    ("I want to insure Eleanor, my 1967 Mustang, as a classic car.", "Agreed-value classic car insurance suits a '67 Mustang."),
    ("Eleanor the 1967 Mustang won a prize at the car show!", "Congratulations, the Mustang restoration paid off."),
]


THESEUS_THRESHOLD = 0.45


def theseus_talk() -> list[Exchange]:
    talk: list[Exchange] = []
    fill = filler(40)
    for k, (u, a) in enumerate(THESEUS_PARTS):
        talk.append(("eleanor", u, a))
        talk += fill[4 * k : 4 * k + 4]
    return numbered(talk)


def theseus(tree: CTree) -> Verdict:
    talk = theseus_talk()
    _add_all(tree, talk)
    _close(tree, "theseus")
    before = _eleanor_branches(tree, talk)
    # 0.45, not the default 0.55: with MiniLM centroids the tyre branch sits at cosine
    # 0.47 from the other Eleanor branches (its words are about wheels); the veto still
    # keeps unrelated branches apart at this threshold
    res = tree.reorganize(similarity_threshold=THESEUS_THRESHOLD)
    eleanor = [m for m in tree.exchanges if m.index < len(talk) and talk[m.index][0] == "eleanor"]
    lca = _common_parent(tree, eleanor)
    # one shared parent that is about Eleanor (not ROOT, not a catch-all of everything)
    purity = _purity(lca, talk, "eleanor") if lca is not None else 0.0
    ok = lca is not None and lca is not tree.root and purity >= 0.8
    where = f"{lca.topic_name} ({purity:.0%} Eleanor)" if lca is not None else "nothing"
    return Verdict("theseus", ok, f"{before} separate Eleanor branches; {res['merged']} merges at threshold "
                   f"{THESEUS_THRESHOLD}; smallest shared parent: {where}", tree)


def _eleanor_branches(tree: CTree, talk) -> int:
    return len({m.parent.node_id for m in tree.exchanges if m.index < len(talk) and talk[m.index][0] == "eleanor"})


def _common_parent(tree: CTree, nodes):
    if not nodes:
        return None
    chains = [tree.get_ancestors(n.parent) for n in nodes]
    common = None
    for level in zip(*chains):
        if all(t is level[0] for t in level):
            common = level[0]
        else:
            break
    return common


MULTIHOP = [
    ("sarah", "My friend Sarah is severely allergic to peanuts.",
     "Thanks for telling me. A peanut allergy can be life-threatening, so Sarah must avoid peanuts entirely."),
    ("tokyo", "What's the weather like in Tokyo this week?", "Tokyo expects rain on Tuesday and sunshine later."),
    ("party", "I'm planning Sarah's surprise birthday party and I'll bake a cake for it.",
     "Lovely! Plan the guest list, decorations and a cake she will enjoy."),
    ("bike", "How do I fix a flat bike tire?", "Remove the wheel, find the puncture, patch the tube and reinflate."),
    ("recipe", "Can you give me a Thai peanut butter cake recipe?",
     "Sure: flour, sugar, eggs, coconut milk and a cup of peanut butter; bake at 175 °C for 35 minutes."),
]


def multihop(tree: CTree) -> Verdict:
    _add_all(tree, MULTIHOP)
    prompt, _ = _prompt(tree, "I'm making the Peanut Butter Cake for Sarah's party. Good idea?")
    need = {"allergy": "allergic to peanuts", "party": "surprise birthday party", "recipe": "peanut butter cake recipe"}
    missing = [k for k, v in need.items() if v not in prompt]
    noise = [w for w in ("Tokyo", "bike") if w in prompt]
    ok = not missing and not noise
    return Verdict("multihop", ok, "allergy, party and recipe " + ("all recalled" if not missing else f"missing {missing}")
                   + ("; no Tokyo or bike" if not noise else f"; noise: {noise}"), tree, prompt)


SCENARIOS: dict[str, Callable[[CTree], Verdict]] = {
    "needle": needle, "overwrite": overwrite, "drift": drift, "theseus": theseus, "multihop": multihop,
}

TALKS = {"needle": needle_talk, "overwrite": overwrite_talk, "drift": drift_talk, "theseus": theseus_talk,
         "multihop": lambda: MULTIHOP}


def exchange_count(name: str) -> int:
    """How many exchanges the scenario adds: its talk, and the closing exchange of those that have one."""
    return len(TALKS[name]()) + (name in CLOSING)


def run(names: list[str], judge: str = "embedding", base_url: str | None = None, model: str | None = None,
        embed_fn=None, out=None, show_tree: bool = True, llm_judge=None) -> list[Verdict]:
    out = out or sys.stdout
    verdicts = []
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            tree = _tree(judge, base_url, model, embed_fn, f"{tmp}/{name}.db", llm_judge)
            v = SCENARIOS[name](tree)
            if show_tree:
                print(f"\n=== {name} ===", file=out)
                print(tree.render_tree(), file=out)
            print(f"{'PASS' if v.passed else 'FAIL'}  {name}: {v.detail}", file=out)
            if tree.vdb is not None:
                tree.vdb.close()
            verdicts.append(v)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", choices=[*SCENARIOS, []], metavar="NAME",
                    help=f"scenarios to run (default: all): {', '.join(SCENARIOS)}")
    ap.add_argument("--judge", default="embedding", choices=["llm", "embedding", "auto"])
    ap.add_argument("--base-url")
    ap.add_argument("--model")
    ap.add_argument("--quiet", action="store_true", help="verdicts only, no trees")
    args = ap.parse_args(argv)
    verdicts = run(args.names or list(SCENARIOS), args.judge, args.base_url, args.model, show_tree=not args.quiet)
    return 0 if all(v.passed for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
