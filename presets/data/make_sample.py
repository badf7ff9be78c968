"""Generate ``sample_conversations.json``: the bundled FastChat-format data of the tiny default.

Written for trainwiz (not copied from any dataset): small facts, arithmetic, text chores and
multi-turn follow-ups, so that a tiny model has varied but learnable text and the sentencepiece
tokenizer sees a realistic alphabet. Deterministic (fixed seed): rerunning gives the same file.
Run: python presets/data/make_sample.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Kenya": "Nairobi",
    "Canada": "Ottawa",
    "Brazil": "Brasilia",
    "Egypt": "Cairo",
    "Norway": "Oslo",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Spain": "Madrid",
    "Italy": "Rome",
    "India": "New Delhi",
    "Ghana": "Accra",
    "Poland": "Warsaw",
    "Vietnam": "Hanoi",
    "Portugal": "Lisbon",
}
COLORS = {
    ("blue", "yellow"): "green",
    ("red", "yellow"): "orange",
    ("red", "blue"): "purple",
    ("red", "white"): "pink",
    ("black", "white"): "grey",
    ("blue", "white"): "light blue",
}
ANIMALS = {
    "cat": "meows",
    "dog": "barks",
    "cow": "moos",
    "duck": "quacks",
    "owl": "hoots",
    "lion": "roars",
    "sheep": "bleats",
    "horse": "neighs",
    "frog": "croaks",
    "bee": "buzzes",
}
TIPS = {
    "boil an egg": "Place the egg in boiling water for about nine minutes, then cool it in cold water.",
    "water a cactus": "Water it deeply but rarely, and let the soil dry out completely between waterings.",
    "fall asleep faster": "Keep a regular bedtime, dim the lights an hour before, and leave the phone in another room.",
    "learn new words": "Read every day, write each new word in a sentence, and review the list after a week.",
    "keep bread fresh": "Store it in a paper bag at room temperature, or freeze slices you will not eat soon.",
    "save money on groceries": "Plan meals for the week, shop with a list, and buy staples in larger packs.",
    "start running": "Begin with short runs mixed with walking, three times a week, and add a few minutes each week.",
    "clean a keyboard": "Unplug it, turn it upside down to shake out crumbs, and wipe the keys with a damp cloth.",
}
WORDS = {
    "river": "a large natural stream of water flowing toward the sea or a lake",
    "harvest": "the time when ripe crops are gathered from the fields",
    "lantern": "a lamp with a protective case that can be carried",
    "glacier": "a slow moving mass of ice formed from packed snow",
    "orchard": "a piece of land planted with fruit trees",
    "compass": "a tool whose needle points north, used to find direction",
    "meadow": "a field of grass and wild flowers",
    "summit": "the highest point of a hill or mountain",
}
UNITS = [
    ("kilometers", "meters", 1000),
    ("hours", "minutes", 60),
    ("kilograms", "grams", 1000),
    ("minutes", "seconds", 60),
    ("meters", "centimeters", 100),
    ("days", "hours", 24),
]
GREETINGS = [
    "Hi!",
    "Hello there.",
    "Good morning!",
    "Hey, are you around?",
    "Hello, can you help me?",
]


def _arith(rng: random.Random) -> list[tuple[str, str]]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice(["plus", "minus", "times"])
    value = {"plus": a + b, "minus": a - b, "times": a * b}[op]
    turns = [(f"What is {a} {op} {b}?", f"{a} {op} {b} is {value}.")]
    if rng.random() < 0.4:
        turns.append(("And if you double that?", f"Doubling {value} gives {2 * value}."))
    return turns


def _capital(rng: random.Random) -> list[tuple[str, str]]:
    country = rng.choice(sorted(CAPITALS))
    turns = [
        (f"What is the capital of {country}?", f"The capital of {country} is {CAPITALS[country]}.")
    ]
    if rng.random() < 0.4:
        other = rng.choice(sorted(CAPITALS))
        turns.append((f"And {other}?", f"The capital of {other} is {CAPITALS[other]}."))
    return turns


def _color(rng: random.Random) -> list[tuple[str, str]]:
    (a, b), mix = rng.choice(sorted(COLORS.items()))
    return [
        (f"What color do I get if I mix {a} and {b} paint?", f"Mixing {a} and {b} gives {mix}.")
    ]


def _animal(rng: random.Random) -> list[tuple[str, str]]:
    animal = rng.choice(sorted(ANIMALS))
    return [(f"What sound does a {animal} make?", f"A {animal} {ANIMALS[animal]}.")]


def _tip(rng: random.Random) -> list[tuple[str, str]]:
    task = rng.choice(sorted(TIPS))
    turns = [(f"How do I {task}?", TIPS[task])]
    if rng.random() < 0.5:
        turns.append(("Thanks, that helps.", "You are welcome. Good luck!"))
    return turns


def _word(rng: random.Random) -> list[tuple[str, str]]:
    word = rng.choice(sorted(WORDS))
    return [(f"Define the word '{word}'.", f"'{word.capitalize()}' means {WORDS[word]}.")]


def _units(rng: random.Random) -> list[tuple[str, str]]:
    big, small, factor = rng.choice(UNITS)
    n = rng.randint(2, 12)
    return [
        (f"How many {small} are in {n} {big}?", f"There are {n * factor} {small} in {n} {big}.")
    ]


def _text_chore(rng: random.Random) -> list[tuple[str, str]]:
    word = rng.choice(sorted(WORDS) + sorted(ANIMALS) + sorted(CAPITALS.values()))
    kind = rng.choice(["reverse", "upper", "count"])
    if kind == "reverse":
        return [(f"Spell '{word}' backwards.", f"'{word}' backwards is '{word[::-1]}'.")]
    if kind == "upper":
        return [(f"Write '{word}' in capital letters.", word.upper())]
    return [
        (
            f"How many letters are in '{word}'?",
            f"'{word}' has {len(word.replace(' ', ''))} letters.",
        )
    ]


def _greeting(rng: random.Random) -> list[tuple[str, str]]:
    turns = [(rng.choice(GREETINGS), "Hello! What can I do for you today?")]
    return turns + rng.choice([_arith, _capital, _tip, _word])(rng)


MAKERS = [_arith, _capital, _color, _animal, _tip, _word, _units, _text_chore, _greeting]


def generate(n: int = 200, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        turns = MAKERS[i % len(MAKERS)](rng)
        conversations = []
        for human, gpt in turns:
            conversations.append({"from": "human", "value": human})
            conversations.append({"from": "gpt", "value": gpt})
        records.append({"id": f"sample_{i:04d}", "conversations": conversations})
    return records


if __name__ == "__main__":
    out = Path(__file__).with_name("sample_conversations.json")
    out.write_text(json.dumps(generate(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
