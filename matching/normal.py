"""Normal forms of filter expressions: NOT pushed to the predicates, then OR of ANDs.

Both are exact for the question that matters, "is the filter TRUE?", under SQL's
three-valued (Kleene) logic:

- De Morgan's laws hold in Kleene logic, and each predicate has an exact negation that
  is UNKNOWN exactly when it is (``NOT a < 5`` is ``a >= 5``: both UNKNOWN on a string
  or a missing ``a``; ``NOT a IN (...)`` is ``a NOT IN (...)``...). So the negation
  normal form has no NOT node and the same value as the original on every event;
- an AND is TRUE when all of its operands are, an OR when one of them is, so
  distributing AND over OR keeps TRUE-ness (it may change FALSE into UNKNOWN, which
  no one asks about: an event matches only when the filter is TRUE).
"""

from __future__ import annotations

from matching.ast import (
    NEGATED_COMPARISON,
    And,
    Between,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Like,
    Not,
    Or,
)

#: Conjunctions a filter may be split into before the index and summaries fall back
#: to treating it whole (DNF can grow exponentially with nested ORs under ANDs).
MAX_CONJUNCTIONS = 32

Conjunction = tuple[Expr, ...]


def negation_normal_form(expr: Expr, negate: bool = False) -> Expr:
    """``expr`` (or ``NOT expr`` when ``negate``) without NOT nodes, And/Or flattened."""
    if isinstance(expr, Not):
        return negation_normal_form(expr.operand, not negate)
    if isinstance(expr, (And, Or)):  # tuples of classes: ``|`` makes a union per call
        # NOT turns an AND into an OR of negations and vice versa.
        kind = (Or if isinstance(expr, And) else And) if negate else type(expr)
        flat: list[Expr] = []
        # A tree already in the form (most filters: the parser flattens) is returned
        # as it is: every filter added to an index comes here.
        changed = negate
        for operand in expr.operands:
            normal = negation_normal_form(operand, negate)
            if isinstance(normal, kind):
                flat.extend(normal.operands)
                changed = True
            else:
                flat.append(normal)
                changed = changed or normal is not operand
        return kind(tuple(flat)) if changed else expr
    if not negate:
        return expr
    if isinstance(expr, Const):
        return Const(not expr.value)
    if isinstance(expr, Compare):
        return Compare(expr.left, NEGATED_COMPARISON[expr.op], expr.right)
    if isinstance(expr, Between):
        return Between(expr.attr, expr.low, expr.high, not expr.negated)
    if isinstance(expr, In):
        return In(expr.attr, expr.values, not expr.negated)
    if isinstance(expr, Like):
        return Like(expr.attr, expr.pattern, expr.escape, not expr.negated)
    if isinstance(expr, IsNull):
        return IsNull(expr.attr, not expr.negated)
    raise TypeError(f"not a filter expression: {expr!r}")


def disjunctive_normal_form(expr: Expr, bound: int = MAX_CONJUNCTIONS
                            ) -> list[Conjunction] | None:
    """Conjunctions of predicates, one of which is TRUE exactly when the negation-normal
    ``expr`` is TRUE; None when there would be more than ``bound`` of them.

    TRUE constants are left out of conjunctions and conjunctions holding a FALSE are
    left out altogether: ``[]`` is a filter that is never TRUE, ``[()]`` one that
    always is.
    """
    if isinstance(expr, Or):
        out: list[Conjunction] = []
        for operand in expr.operands:
            part = disjunctive_normal_form(operand, bound)
            if part is None or len(out) + len(part) > bound:
                return None
            out += part
        return out
    if isinstance(expr, And):
        operands = expr.operands
        for operand in operands:
            if isinstance(operand, (And, Or, Const)):
                break
        else:  # predicates only (the commonest): one conjunction of them all
            return [operands] if bound >= 1 else None
        acc: list[Conjunction] = [()]
        for operand in expr.operands:
            part = disjunctive_normal_form(operand, bound)
            if part is None or len(acc) * len(part) > bound:
                return None
            acc = [a + b for a in acc for b in part]
        return acc
    if isinstance(expr, Const):
        return [()] if expr.value else []
    return [(expr,)]


def conjunctions_of(expr: Expr | None, bound: int = MAX_CONJUNCTIONS
                    ) -> list[Conjunction] | None:
    """The DNF of any expression (None is the empty filter: one empty conjunction)."""
    if expr is None:
        return [()]
    return disjunctive_normal_form(negation_normal_form(expr), bound)
