"""A scripted server's answers as a good model would give them, for the scenarios.

The oracle knows each scenario exchange's true subject (its label), names new topics
after it, continues while the subject stays, and approves a merge only of two topics
about the same subject.
"""

from __future__ import annotations

import json
import re

from scripted_server import Reply

from trace_core import scenarios as S

NAMES = {
    "sourdough": "Sourdough Baking", "marathon": "Marathon Training", "kubernetes": "Kubernetes Operations",
    "gardening": "Tomato Gardening", "jazz": "Jazz Listening", "taxes": "Income Taxes",
    "needle": "Shellfish Allergy", "sarah": "Sarah's Peanut Allergy", "snake": "Ball Python Care",
    "code": "Python Programming", "eleanor": "Eleanor the Mustang", "tokyo": "Tokyo Weather",
    "party": "Sarah's Birthday Party", "bike": "Bike Repair", "recipe": "Peanut Butter Cake", "misc": "Other Questions",
}


def label_table() -> dict[str, str]:
    table = {}
    for talk in S.TALKS.values():
        for label, user, _assistant in talk():
            table[user] = label
    return table


def oracle(table: dict[str, str]):
    def respond(req: dict) -> Reply:
        prompt = req["messages"][-1]["content"]
        if "New exchange:" in prompt:
            user = re.search(r"User: (.*)", prompt).group(1).strip()
            label = next((lab for text, lab in table.items() if text[:60] == user[:60]), "misc")
            path = re.findall(r"^(\d+)\. (.*)$", prompt.split("New exchange:")[0], re.M)
            current = path[-1][1] if path else "ROOT"
            if current == NAMES[label]:
                return Reply(json.dumps({"action": "continue"}))
            return Reply(json.dumps({"action": "new", "parent": 0, "name": NAMES[label]}))
        if "Topic A:" in prompt:
            a = re.search(r"Topic A: (.*?):", prompt).group(1)
            b = re.search(r"Topic B: (.*?):", prompt).group(1)
            return Reply(json.dumps({"merge": a == b}))
        if "Summarise" in prompt:
            first = re.search(r"User: (.*)", prompt)
            return Reply(json.dumps({"summary": first.group(1)[:150] if first else "A conversation."}))
        if "name for the topic" in prompt:
            names = [n for n in NAMES.values() if n in prompt]
            return Reply(json.dumps({"name": names[0] if names else "Mixed Topics"}))
        return Reply("{}")

    return respond
