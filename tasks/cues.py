"""The short lists of cues the answer reader looks for around a statement (``docs/scoring.md``, rules
2 and 3): negation and correction, refusal and doubt, a bound instead of a value, filler words before
a value, and, in the sentence after the final statement, a retraction or an alternative. Each is one
compiled pattern (case-insensitive), read by :mod:`agora.tasks.extraction`.
"""

from __future__ import annotations

import re

NEGATION = re.compile(r"^(?:not|isn't|is\s+not|never|cannot\s+be|can't\s+be|wouldn't\s+be)\b", re.I)
CORRECTION = re.compile(r"^[^,;.]*(?:,|;|\.)?\s*(?:but|rather|instead|it'?s|it\s+is)\s+(?:rather\s+|actually\s+)?", re.I)
#: A refusal: the statement gives up instead of naming a value.
REFUSAL = re.compile(
    r"\b(?:i\s+(?:do\s+not|don't|can\s*not|can't)\s+(?:know|say|tell|answer|determine|solve)|cannot\s+be\s+determined"
    r"|can't\s+be\s+determined|undetermined|indeterminate|not\s+enough\s+information|insufficient\s+information"
    r"|impossible\s+to\s+(?:say|tell|determine|know)|unable\s+to|no\s+way\s+to\s+(?:know|tell)|unclear|unknown"
    r"|no\s+idea|not\s+sure|unsure|none|no\s+(?:valid\s+|possible\s+|such\s+)?(?:solution|answer))\b", re.I)
#: Doubt or giving up after the value (``25, but I'm not sure``, ``... so it is not possible to
#: determine``): a hedge, not an answer.
DOUBT = re.compile(
    r"\b(?:not\s+(?:sure|certain|confident)|unsure|i\s+(?:do\s+not|don't)\s+know|(?:might|may|could)\s+be\s+wrong"
    r"|i\s+(?:might|may)\s+be\s+mistaken|(?:not\s+possible|impossible)\s+to\s+(?:say|tell|determine|know|find)"
    r"|(?:can\s*not|can't)\s+be\s+(?:sure|certain)"
    r"|cannot\s+be\s+determined|can't\s+be\s+determined|not\s+enough\s+information)\b", re.I)
#: Giving up in the sentence of a guessed number (the fallback): ``It cannot be determined whether
#: she has 12``, ``I am unable to determine ...``: a refusal, whatever number the sentence names.
GIVES_UP = re.compile(
    r"\b(?:(?:can\s*not|can't|could\s*not|couldn't|unable\s+to|impossible\s+to|not\s+possible\s+to|no\s+way\s+to)"
    r"\s+(?:determine|know|tell|say|solve|answer)|(?:can\s*not|can't|could\s*not|couldn't)\s+be\s+"
    r"(?:determined|known|calculated|computed|found|answered|solved)|(?:not\s+enough|insufficient|missing)\s+"
    r"(?:information|data)|undetermined|indeterminate|i\s+(?:do\s+not|don't)\s+know|no\s+idea)\b", re.I)
#: A bound just before a guessed number (the fallback): ``at least 12``, ``x > 12``, ``no more than
#: 12``, ``up to 12`` (not ``adds up to 12``, a total); an arrow (``=>``, ``->``) is not ``>``.
BOUND_BEFORE = re.compile(
    r"(?:\bat\s+(?:least|most)|\b(?:no|not)\s+(?:more|less|fewer|greater|higher|lower)\s+than|\b(?:more|less|fewer"
    r"|greater|higher|lower)\s+than|(?<!\badd\s)(?<!adds\s)(?<!added\s)(?<!adding\s)(?<!sums\s)(?<!comes\s)"
    r"(?<!came\s)(?<!totals\s)\bup\s+to|\ba\s+(?:minimum|maximum)\s+of|\b(?:over|under)"
    r"|(?<=[^\s=<>-])\s*(?:>=?|<=?)|[≥≤])\s*(?:[$€£]\s*)?$", re.I)
#: A bound or inequality just after a guessed number: ``12 or more``, ``12 < x``.
BOUND_AFTER_GUESS = re.compile(r"^\s*(?:<(?!<)|>(?!>)|≤|≥)")
FILLER = re.compile(
    r"^(?:[:=\s*]|-(?=\s+[A-Za-z])|(?:therefore|thus|hence|so|then|simply|just|exactly|approximately|about|around|"
    r"roughly|probably|likely|clearly|indeed|now|actually|still|finally|that|option|choice|letter|i\s+think|"
    r"i\s+believe|we\s+get|we\s+have|equal\s+to|given\s+by|calculated\s+as)\b,?)+", re.I)
SEVERAL_WORDS = re.compile(r"^(?:between|either|both|any\s+of|one\s+of|somewhere\s+between)\b\s*", re.I)
#: A bound instead of a value: ``at least 12``, ``no more than 12``, ``≥ 12``.
BOUND = re.compile(
    r"^(?:at\s+(?:least|most)|(?:no|not)\s+(?:more|less|fewer|greater|higher|lower)\s+than|(?:more|less|fewer|greater)"
    r"\s+than|up\s+to|a\s+(?:minimum|maximum)\s+of|(?:over|under)(?=\s*[$€£]?\s*\d)|>=|<=|≥|≤|>|<)", re.I)
BOUND_AFTER = re.compile(
    r"^[\s,]*(?:[A-Za-z]+\s+)?(?:or\s+(?:more|less|fewer|greater|higher|lower|above|below|over|under)|at\s+(?:least|most)"
    r"|(?:and|or)\s+up)\b", re.I)

#: A retraction opening the sentence after the final statement (``Just kidding, it is not 12.``).
RETRACTION = re.compile(
    r"^\W*(?:(?:but|no|oh|wait|ok(?:ay)?)\W+)?(?:just\s+kidding|j/?k|scratch\s+that|never\s*mind|i\s+take\s+(?:that|it)\s+back"
    r"|disregard\s+(?:that|this|the\s+above)|ignore\s+(?:that|this|the\s+above))\b", re.I)
#: Another value offered in the sentence after the final statement (``Alternatively, it could be 13.``).
ALTERNATIVE = re.compile(
    r"^\W*(?:alternatively|or(?:\s+(?:maybe|possibly|perhaps|else))?|maybe|perhaps|possibly)\b[\s,:]*"
    r"(?:(?:it|the\s+answer|that|this)\s+(?:could|might|may|can|would)\s+(?:also\s+)?be\b[\s:]*)?", re.I)
#: How a retraction's own statement opens (``..., it is not 12``).
RESTATED = re.compile(r"^[\s,.:;!-]*(?:(?:it|that|the\s+answer)(?:'s|\s+is|\s+was)\s+)?", re.I)
