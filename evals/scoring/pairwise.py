"""The pairwise judge: the prompt it is asked, how its answer is read, and how two orders combine.

The judge sees the same question twice, the candidate's answer first and then second, so that a
judge that prefers whatever comes first cancels out: the candidate wins only when both orders say
so, loses only when both say the other, and any split is a tie.
"""

from __future__ import annotations

import re
from enum import StrEnum

DEFAULT_RUBRIC = "Which answer is more correct, helpful and faithful to the question?"
_LAST_WORD = re.compile(r"\b(A|B|TIE)\b")


class Outcome(StrEnum):
    WIN = "win"
    TIE = "tie"
    LOSS = "loss"


def judge_messages(*, rubric: str, question: str, first: str, second: str) -> list[dict[str, str]]:
    """The chat the judge answers with one word: A, B or TIE."""
    return [
        {
            "role": "system",
            "content": "You compare two answers to one question. "
            f"{rubric or DEFAULT_RUBRIC} Reply with one word: A, B or TIE.",
        },
        {
            "role": "user",
            "content": f"Question:\n{question}\n\nAnswer A:\n{first}\n\nAnswer B:\n{second}\n\n"
            "Which is better: A, B or TIE?",
        },
    ]


def read_choice(reply: str) -> str:
    """'A', 'B' or 'TIE': the judge's last word that is one of them; anything else is a tie."""
    found = _LAST_WORD.findall(reply.upper())
    return found[-1] if found else "TIE"


def combine(candidate_first: str, candidate_second: str) -> Outcome:
    """The outcome for the candidate, from the choice when it was shown as A, then as B."""
    first = {"A": Outcome.WIN, "B": Outcome.LOSS}.get(candidate_first, Outcome.TIE)
    second = {"B": Outcome.WIN, "A": Outcome.LOSS}.get(candidate_second, Outcome.TIE)
    return first if first == second else Outcome.TIE
