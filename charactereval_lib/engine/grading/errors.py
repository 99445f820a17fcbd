"""Exception types of the grading engine.

Each condition under which openai/evals crashes gets its own type here. Every type also
derives from the built-in exception evals raises in that situation (AssertionError, KeyError,
ValueError, AttributeError), so callers that catch the built-in keep working, while our own
callers can catch the precise condition (or `GradingError` for all of them).
"""

from __future__ import annotations


class GradingError(Exception):
    """Base class of every error the grading engine raises on purpose."""

    def __str__(self) -> str:
        # KeyError's str() wraps the message in quotes; one plain line reads better everywhere.
        return str(self.args[0]) if self.args else ""


class ChoicePunctuationError(GradingError, AssertionError):
    """A choice string contains ASCII punctuation (evals: AssertionError in choice resolution).

    The evals parser deletes ASCII punctuation from every judge line, so such a choice could
    never be matched.
    """


class UnknownEvalTypeError(GradingError, KeyError):
    """The eval type has no answer-prompt suffix (evals: KeyError from its suffix table)."""


class MissingEvalTypeError(GradingError, AttributeError):
    """Neither the spec nor the eval sets an eval type, so a reply cannot be parsed.

    evals crashes with AttributeError ('NoneType' object has no attribute 'startswith').
    """


class UnscoredChoiceError(GradingError, KeyError):
    """A valid choice has no entry in the score map (evals: KeyError)."""


class ScoreMapError(GradingError, ValueError):
    """The score map cannot be built or used: a non-numeric choice under `from_strings`, or an
    empty map asked for the score of an invalid answer (evals: ValueError)."""


class MissingTemplateKeyError(GradingError, AssertionError):
    """The prompt template needs a field that neither the sample, the completions nor the
    spec arguments provide (evals: AssertionError 'Required: [...], got: [...].')."""


class MissingLabelError(GradingError, AssertionError):
    """Meta-evaluation met a sample without a human `choice` label (evals: AssertionError)."""


class InvalidIdealError(GradingError, ValueError):
    """An ideal answer given to the JSON matcher is not valid JSON (evals: JSONDecodeError)."""


class EmptyIdealsError(GradingError, ValueError):
    """The fuzzy matcher's F1 needs at least one ideal answer (evals: ValueError from max())."""


class SpecError(GradingError, ValueError):
    """A model-graded spec file is malformed. The message is one line naming file and field."""


class SampleRefusedError(GradingError, ValueError):
    """A sample evals cannot fill a prompt from (evals crashes with AttributeError, KeyError or
    TypeError): an input field that is neither text nor a chat prompt, a chat message without
    content, a field named like a parameter of evals' formatting functions, a value its template
    field cannot format. The message is one line naming the field."""
