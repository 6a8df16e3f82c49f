"""Prompts shared by the protocols: solving a problem, with few-shot exemplars written for Agora.

Every prompt ends with an instruction to finish with ``The answer is ...`` so
:func:`agora.tasks.extract_answer` finds the answer; base models (few-shot format) see the same
exemplars as a ``Question:/Answer:`` transcript.
"""

from __future__ import annotations

from agora.tasks.problem import Problem

MATH_SYSTEM = ("Solve the math problem. Reason briefly step by step in words, not code, then end with "
               "'The answer is N.' where N is the final number.")
MC_SYSTEM = ("Answer the multiple-choice question. Think briefly, then end with "
             "'The answer is X.' where X is the letter of the correct option.")
OPEN_SYSTEM = "You are a helpful assistant. Answer the request accurately and concisely."

MATH_SHOTS: tuple[tuple[str, str], ...] = (
    ("Ana has 4 boxes with 6 pens in each box. How many pens does she have?",
     "4 boxes times 6 pens is 4 * 6 = 24. The answer is 24."),
    ("Leo had 15 stamps and gave 7 to his sister. How many stamps does he have left?",
     "He gives away 7 of 15, so 15 - 7 = 8. The answer is 8."),
    ("A shop sells 3 cakes on Monday and twice as many on Tuesday. How many cakes did it sell in total?",
     "Tuesday is 2 * 3 = 6 cakes. Total is 3 + 6 = 9. The answer is 9."),
)
MC_SHOTS: tuple[tuple[str, str], ...] = (
    ("Which planet is closest to the Sun?\nA. Venus\nB. Mercury\nC. Earth\nD. Mars",
     "Mercury orbits nearest the Sun. The answer is B."),
    ("What is the boiling point of water at sea level in Celsius?\nA. 50\nB. 90\nC. 100\nD. 120",
     "Water boils at 100 degrees Celsius at sea level. The answer is C."),
)


def solver_messages(problem: Problem, shots: int = 2) -> list[dict[str, str]]:
    """Chat messages asking a model to solve ``problem``: system, ``shots`` exemplars, question.

    Args:
        problem: the item; its ``kind`` picks math, multiple-choice or open instructions.
        shots: number of worked exemplars (0 to 3 for math, 0 to 2 for multiple choice).
    """
    if problem.kind == "mc":
        system, exemplars = MC_SYSTEM, MC_SHOTS
    elif problem.kind == "math":
        system, exemplars = MATH_SYSTEM, MATH_SHOTS
    else:
        system, exemplars = OPEN_SYSTEM, ()
    messages = [{"role": "system", "content": system}]
    for question, answer in exemplars[: max(0, shots)]:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": problem.question})
    return messages


FINISH_MC = "End with 'The answer is X.' where X is the letter of the correct option."
FINISH_MATH = "End with 'The answer is N.' where N is the final answer."


def finish_instruction(problem: Problem) -> str:
    """The closing instruction of a prompt that shows other answers: how to state the final answer."""
    return FINISH_MC if problem.kind == "mc" else FINISH_MATH


def with_question(problem: Problem, shots: int, text: str) -> list[dict[str, str]]:
    """:func:`solver_messages` (system and exemplars) with the last user turn replaced by ``text``."""
    messages = solver_messages(problem, shots)
    messages[-1] = {"role": "user", "content": text}
    return messages
