"""Cost-aware drafting: how wide each step's verify forward is, from measured costs.

The rule. A verify step of width w (each row's next token plus up to w drafts; w = 0 is
mlx-lm's plain step) over B rows costs r_B(w) plain steps. Row i, offering a draft of L_i
tokens whose drafted positions it accepts with probability p_i each (given the ones before
were accepted), emits in expectation 1 + a_i(min(L_i, w)) tokens, a(k) = p + p^2 + ... + p^k.
The step takes the w with the most expected tokens per unit of step time,
(B + sum_i a_i) / r_B(w) (w = 0 scores B), among the widths where no drafting row expects
less than a token per plain step's time. Why: on a CPU the forward's cost grows with its
width B x (w + 1), and a row with a short draft or none pays the padded width too, so a wide
verify pays only where enough rows are likely to accept; where r is near 1 (Apple silicon at
small batches) the rule drafts wide. It only picks which drafts are verified, never what is
accepted: greedy output is the same with any choice.

r_B(w) = 1 + w * extra_B / plain_B is measured online (StepCosts: moving averages of real
steps' seconds: a plain step's, and what each verified position adds, per row count B);
p_i is each row's own record (Acceptance), which drifts back to a prior while the row does
not draft, so a row turned off is tried again now and then.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxd.config import setting

# Weight of the newest step in the moving averages, and the outlier bound: a step counts as
# at most twice the estimate (a busy machine stalls single steps).
_ALPHA = 0.2
_OUTLIER = 2.0
# r(w) = 1 + slope * w until some width is measured: optimistic, so that a batch drafts
# at the prior acceptance and so measures what verifying costs.
PRIOR_SLOPE = 0.1
# A row count's plain step is measured again after REFRESH steps without one, its verify
# steps (optimistically: at the prior slope) after VERIFY_REFRESH: a verify sample stalled
# by another process must not shut drafting off for long.
REFRESH = 64
VERIFY_REFRESH = 16
# Acceptance: a prior of PRIOR_P worth PRIOR_WEIGHT drafted positions; older evidence decays
# by DECAY per verified draft, and by IDLE_DECAY per step a row's draft is not verified.
PRIOR_P = 0.5
PRIOR_WEIGHT = 2.0
DECAY = 0.9
IDLE_DECAY = 0.98


@dataclass(slots=True)
class Acceptance:
    """One row's chance that a drafted position is accepted, given the ones before were."""

    accepted: float = 0.0
    trials: float = 0.0

    @property
    def p(self) -> float:
        return (self.accepted + PRIOR_P * PRIOR_WEIGHT) / (self.trials + PRIOR_WEIGHT)

    def observe(self, drafted: int, accepted: int) -> None:
        """A verified draft of `drafted` tokens kept `accepted`: that many positions passed
        and, unless all did, one failed."""
        self.accepted = self.accepted * DECAY + accepted
        self.trials = self.trials * DECAY + accepted + (accepted < drafted)

    def idle(self) -> None:
        self.accepted *= IDLE_DECAY
        self.trials *= IDLE_DECAY

    def expected(self, k: int) -> float:
        """Expected accepted tokens of a k-token draft."""
        p = self.p
        return sum(p**j for j in range(1, k + 1))


@dataclass(slots=True)
class _Shape:
    """Moving averages over the steps of one row count: a plain step's seconds, and what
    each verified position adds per row count (a step of width w: plain + w * extra)."""

    plain_s: float | None = None
    extra_s: float | None = None
    since_plain: int = 0
    since_verify: int = 0


class StepCosts:
    """Measured cost of a step by shape (rows x width) relative to a plain step; the one
    place where step times are kept. Pure Python, no mlx."""

    def __init__(self) -> None:
        self._shapes: dict[int, _Shape] = {}
        self._last: tuple[int, int, float] | None = None  # rows, width, start of the last step
        self._seen: set[tuple[int, int]] = set()  # (rows, width) that ran once unmeasured

    def started(self, rows: int, width: int, at: float) -> None:
        """A step of this shape starts at `at` (perf_counter): the previous step took from its
        own start to now, the work around it included (mlx-lm runs a plain step's forward
        behind the engine's per-step work, a verify step before it)."""
        last = self._last
        if last is not None and last[:2] in self._seen:
            self.observe(last[0], last[1], at - last[2])
        elif last is not None:  # a shape's first forward also builds its kernels
            self._seen.add(last[:2])
        self._last = (rows, width, at)
        shape = self._shapes.setdefault(rows, _Shape())
        shape.since_plain += 1
        shape.since_verify += 1

    def spoil(self) -> None:
        """The step just started also did other work (a prefill): it is not a sample."""
        self._last = None

    def observe(self, rows: int, width: int, seconds: float) -> None:
        shape = self._shapes.setdefault(rows, _Shape())
        if width == 0:
            shape.plain_s = _ewma(shape.plain_s, seconds)
            shape.since_plain = 0
        elif shape.plain_s is not None:
            shape.extra_s = _ewma(shape.extra_s, max(seconds - shape.plain_s, 0.0) / width)
            shape.since_verify = 0

    def needs_plain(self, rows: int) -> bool:
        """The plain step over `rows` rows is unmeasured or due for a new measurement."""
        shape = self._shapes.get(rows)
        return shape is None or shape.plain_s is None or shape.since_plain >= REFRESH

    def ratio(self, rows: int, width: int) -> float:
        """r_rows(width): a step of this shape over a plain step over as many rows. A row
        count never measured verifying takes the nearest one's slope, else PRIOR_SLOPE, and
        so does one due for a new measurement (optimistic, so that a step measures it)."""
        shape = self._shapes.get(rows)
        if shape is not None and shape.since_verify >= VERIFY_REFRESH:
            return 1.0 + PRIOR_SLOPE * width
        return 1.0 + self._slope(rows) * width

    def _slope(self, rows: int) -> float:
        for count in sorted(self._shapes, key=lambda n: abs(n - rows)):
            shape = self._shapes[count]
            if shape.plain_s and shape.extra_s is not None:
                return shape.extra_s / shape.plain_s
        return PRIOR_SLOPE


class DraftPolicy:
    """Chooses each step's verify width (module docstring: the rule and why)."""

    def __init__(self, costs: StepCosts | None = None) -> None:
        self.costs = costs if costs is not None else StepCosts()

    def width(
        self, rows: int, offers: list[tuple[Acceptance, int]], most: int, least: int = 0
    ) -> int:
        """The verify width for a step over `rows` rows, where each drafting row offers a
        draft of some length with its acceptance record: from `least` (rows that must
        verify their drafts) to `most`; 0 is a plain step."""
        if not offers or most <= 0 or (least == 0 and self.costs.needs_plain(rows)):
            return least
        best, best_score = least, self._score(rows, offers, least)
        for w in range(least + 1, most + 1):
            score = self._score(rows, offers, w)
            if score > best_score and self._none_slowed(rows, offers, w):
                best, best_score = w, score
        return best

    def _none_slowed(self, rows: int, offers: list[tuple[Acceptance, int]], width: int) -> bool:
        """Every drafting row expects at least a token per plain step's time at this width:
        a batch that nothing refills ends with its slowest rows, which a width paid for by
        the other rows' good drafts would slow."""
        ratio = self.costs.ratio(rows, width)
        return all(1 + acc.expected(min(length, width)) >= ratio for acc, length in offers)

    def _score(self, rows: int, offers: list[tuple[Acceptance, int]], width: int) -> float:
        """Expected tokens per plain step's time of a step of this width."""
        tokens = rows + sum(acc.expected(min(length, width)) for acc, length in offers)
        return tokens / self.costs.ratio(rows, width)


def draft_policy_every() -> bool:
    """MLXD_DRAFT_POLICY: `every` verifies every draft, `measured` (default) follows the rule."""
    mode = setting("draft_policy").strip().lower()
    if mode not in ("measured", "every"):
        raise ValueError(f"MLXD_DRAFT_POLICY must be 'measured' or 'every', not {mode!r}")
    return mode == "every"


def _ewma(old: float | None, new: float) -> float:
    if old is None:
        return new
    return old + _ALPHA * ((min(new, _OUTLIER * old) if old > 0 else new) - old)
