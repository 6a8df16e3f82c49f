"""Benchmark tasks: loading problem files and checking answers.

This folder is outside the three of the design card (``agents``, ``graphs``, ``training``) because
every one of them needs it and it belongs to none: agents prompt with a problem, graphs score
their methods against its gold answer, and training turns the same answer checker into a reward.

Public surface::

    from agora.tasks import Problem, load_problems, extract_answer, find_answer, is_correct, synthetic_problems
    from agora.tasks import score_answer, score_results   # the one scorer of runs, bench and replay
"""

from agora.tasks.answers import extract_answer, find_answer
from agora.tasks.comparison import answer_key, is_correct
from agora.tasks.errors import InputError
from agora.tasks.extraction import Extraction
from agora.tasks.loaders import FORMATS, TaskFormatError, load_problems
from agora.tasks.problem import Problem
from agora.tasks.scoring import score_answer, score_results
from agora.tasks.synthetic import synthetic_problems

__all__ = [
    "FORMATS",
    "Extraction",
    "InputError",
    "Problem",
    "TaskFormatError",
    "answer_key",
    "extract_answer",
    "find_answer",
    "is_correct",
    "load_problems",
    "score_answer",
    "score_results",
    "synthetic_problems",
]
