"""The pool's errors, in a module of their own so that backends can raise them without importing
the pool (which imports the backends). :mod:`agora.models.pool` re-exports every one."""

from __future__ import annotations

from agora.tasks.errors import InputError


class PoolConfigError(InputError):
    """A pool file that cannot be used: ``file: models[i] (name): field 'x': what is wrong``."""


class UnknownNameError(KeyError):
    """A name given by the user that Agora does not know (a pool member, a protocol or graph id, a
    recipe, a backend); the message names it and the known ones. It is a ``KeyError`` (code that
    catches ``KeyError`` keeps working), but the CLI prints only this kind as one ``error:`` line:
    any other ``KeyError`` comes from a bug and surfaces as one, with its traceback."""


class ModelUnavailableError(ConnectionError):
    """A backend that cannot reach its model at all (every endpoint refuses connections).

    The pool retries it like any failure, then raises :class:`ModelCallError` instead of returning
    no samples: a dead server stops the run (finished questions stay recorded and the run resumes
    with the same run id) rather than recording every later question as failed.
    """


class ModelCallError(RuntimeError):
    """A model call that failed after all retries. ``records`` holds the logged attempts."""

    def __init__(self, message: str, records: list[dict]):
        super().__init__(message)
        self.records = records


class EmptyResponseError(RuntimeError):
    """A backend answered without any generation (e.g. a server reply with zero choices), or with
    an empty or null text: a failed attempt like any other, logged as a trace record and retried;
    when every attempt is empty the question is failed, not wrong."""


class MemberContractError(TypeError):
    """A member whose ``sample``/``asample`` broke the member contract
    (:class:`agora.models.contract.ModelMember`): it returned something that is not a list of
    :class:`~agora.models.contract.Sample`, or fewer samples than ``n`` without saying it tops up
    itself. A permanent error (:func:`agora.models.retry.is_transient` is false): the pool records
    the attempt as failed, with this message naming the member and what it returned, and does not
    ask again (the same code would return the same thing)."""


class InvalidReplyError(RuntimeError):
    """A server reply that is not a completion (an HTML page, a body without ``choices``): a
    transient failure, retried like a 5xx."""
