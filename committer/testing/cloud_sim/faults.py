"""Faults armed through the control API: random and scripted, seeded, filtered by operation.

- random: ``throttle_rate`` (the fraction of data requests answered as throttled without
  being carried out) and ``lose_rate`` (the fraction carried out, then the connection closed
  without an answer: the ambiguous lost response), applied to the operations in ``ops``
  (``None``: every data operation);
- scripted, consumed in arming order by the next requests of their operation: ``fail`` (the
  next ``times`` requests answered with ``status``, error ``code`` and ``message`` instead of
  being carried out), ``lose`` (the next ``times`` carried out and their answers lost) and
  ``garble`` (the next ``times`` carried out and answered with their status, but a multipart
  body no client can read: every part's status line mangled, as a broken proxy or a service
  bug would leave a batch's answer; a client cannot tell which parts were done).

A scripted rule takes precedence over the random draw. Sub-requests of a batch are drawn for
too (by their own operation, e.g. ``delete_blob``): a throttle or a failure becomes that part's
answer; a lost answer cannot be lost alone, so for a sub-request ``lose`` is not drawn.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["GARBLE", "LOSE", "THROTTLE", "Fail", "FaultError", "Faults", "garbled"]


class Fail:
    """A scripted failure: answer ``status`` / ``code`` instead of carrying the request out."""

    __slots__ = ("code", "message", "status")

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message


THROTTLE: Final = "throttle"
LOSE: Final = "lose"
GARBLE: Final = "garble"
Drawn = Fail | str | None


def garbled(body: bytes) -> bytes:
    """A multipart answer's body with each part's HTTP status line made unreadable (the
    parts, their MIME headers and the delimiters are kept)."""
    return body.replace(b"\r\n\r\nHTTP/1.1 ", b"\r\n\r\n?garbled-status ")


class FaultError(ValueError):
    """A fault specification the control API cannot take."""


class _Rule:
    __slots__ = ("fail", "kind", "op", "remaining")

    def __init__(self, op: str, times: int, fail: Fail | None, kind: str = LOSE) -> None:
        self.op = op
        self.remaining = times
        self.fail = fail  # None: ``kind`` (lose or garble)
        self.kind = kind


class Faults:
    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self.throttle_rate = 0.0
        self.lose_rate = 0.0
        self.ops: frozenset[str] | None = None
        self._rules: list[_Rule] = []
        self.active = False  # anything armed: the per-request fast path skips the draw

    def _refresh(self) -> None:
        self.active = bool(self._rules) or self.throttle_rate > 0 or self.lose_rate > 0

    def clear(self) -> None:
        self.throttle_rate = self.lose_rate = 0.0
        self.ops = None
        self._rules.clear()
        self._refresh()

    def configure(self, spec: Mapping[str, Any]) -> None:
        """Apply a control-API specification (see the module doc; ``clear`` first drops
        everything armed, ``seed`` re-seeds the random draws)."""
        known = {"clear", "seed", "throttle_rate", "lose_rate", "ops", "fail", "lose",
                 "garble"}
        unknown = set(spec) - known
        if unknown:
            raise FaultError(f"unknown fault fields {sorted(unknown)}; known: {sorted(known)}")
        if spec.get("clear"):
            self.clear()
        if "seed" in spec:
            self._rng = random.Random(spec["seed"])
        for name in ("throttle_rate", "lose_rate"):
            if name in spec:
                rate = float(spec[name])
                if not 0.0 <= rate <= 1.0:
                    raise FaultError(f"{name} must be within [0, 1], not {rate}")
                setattr(self, name, rate)
        if "ops" in spec:
            ops = spec["ops"]
            self.ops = None if ops is None else frozenset(str(o) for o in ops)
        for rule in spec.get("fail", []):
            try:
                op, times = str(rule["op"]), int(rule.get("times", 1))
                status = int(rule.get("status", 503))
                code = str(rule.get("code", "ServerBusy"))
                message = str(rule.get("message", "injected fault"))
            except (KeyError, TypeError, ValueError) as e:
                raise FaultError(f"bad fail rule {rule!r}: {e}") from None
            self._rules.append(_Rule(op, times, Fail(status, code, message)))
        for kind in (LOSE, GARBLE):
            for rule in spec.get(kind, []):
                try:
                    op, times = str(rule["op"]), int(rule.get("times", 1))
                except (KeyError, TypeError, ValueError) as e:
                    raise FaultError(f"bad {kind} rule {rule!r}: {e}") from None
                self._rules.append(_Rule(op, times, None, kind))
        self._refresh()

    def draw(self, op: str, *, can_lose: bool = True) -> Drawn:
        """What happens to this request of ``op``: ``None`` (nothing), ``THROTTLE``, ``LOSE``,
        ``GARBLE`` or a :class:`Fail`. A sub-request (``can_lose`` false) takes only
        failures."""
        for rule in self._rules:
            if rule.op == op and (can_lose or rule.fail is not None):
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                    self._refresh()
                return rule.kind if rule.fail is None else rule.fail
        if self.ops is not None and op not in self.ops:
            return None
        if self.throttle_rate and self._rng.random() < self.throttle_rate:
            return THROTTLE
        if can_lose and self.lose_rate and self._rng.random() < self.lose_rate:
            return LOSE
        return None

    def describe(self) -> dict[str, Any]:
        return {"throttle_rate": self.throttle_rate, "lose_rate": self.lose_rate,
                "ops": None if self.ops is None else sorted(self.ops),
                "scripted": [{"op": r.op, "remaining": r.remaining,
                              "kind": r.kind if r.fail is None else "fail",
                              **({} if r.fail is None else {"status": r.fail.status,
                                                            "code": r.fail.code})}
                             for r in self._rules]}
