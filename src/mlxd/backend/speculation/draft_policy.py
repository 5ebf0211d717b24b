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

r_B(w) = 1 + w * e_B(w) is measured online (StepCosts: moving averages of real steps:
a plain step's seconds per row count B, and e_B(w), what each verified position adds per row
count, drafter set and width, in plain steps of the time: a step whose rows ask an MTP head
or a draft model also pays their forwards, which prompt lookup does not, so each set's
verify steps are measured apart);
p_i is each row's own record (Acceptance), which drifts back to a prior while the row does
not draft, so a row turned off is tried again now and then. A row none of whose drafts was
verified yet is tried once at width 1 where that would pay were its drafts right: at the
prior alone a row that accepts everything may never verify, and so never show it. A row
joins with its kind's pooled record as its prior (speculation.drafts.Drafts.pooled).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
# A verify re-measurement that does not find verifying cheaper (by more than AGREE) doubles
# the wait before the next, up to VERIFY_REFRESH_MAX, or up to PROBE_STEPS times what one
# costs beyond a plain step where that is more: each costs a wide step where verifying
# loses (on a small model far more than a plain step: its drafting and syncs), and only a
# cheaper verify could change the choice. So re-measuring costs ~1% of steps at most.
VERIFY_REFRESH_MAX = 256
PROBE_STEPS = 100
AGREE = 0.25
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
    tried: bool = False  # one of its drafts was verified (DraftPolicy probes a row once)
    prior: float = PRIOR_P  # what it drifts back to: PRIOR_P, or its kind's record (joined)

    @property
    def p(self) -> float:
        return (self.accepted + self.prior * PRIOR_WEIGHT) / (self.trials + PRIOR_WEIGHT)

    def joined(self) -> Acceptance:
        """A new row's record where this is its kind's pooled one: its prior is this p (rows
        of one drafter accept alike: a new row need not earn its kind's odds again), tried
        where the kind was (no probe: the kind's evidence stands for it)."""
        return Acceptance(tried=self.tried, prior=self.p)

    def observe(self, drafted: int, accepted: int) -> None:
        """A verified draft of `drafted` tokens kept `accepted`: that many positions passed
        and, unless all did, one failed."""
        self.accepted = self.accepted * DECAY + accepted
        self.trials = self.trials * DECAY + accepted + (accepted < drafted)
        self.tried = True

    def idle(self) -> None:
        self.accepted *= IDLE_DECAY
        self.trials *= IDLE_DECAY

    def expected(self, k: int) -> float:
        """Expected accepted tokens of a k-token draft."""
        return _expected(self.p, k)


@dataclass(slots=True)
class _Measured:
    """A moving average of seconds, the steps since its last sample, how many steps a
    verify estimate waits before it is measured again, and whether the verify step under
    way is that re-measurement. A verify estimate is what a verified position adds, in
    plain steps of the time, one average per width (`widths`; `seconds` unused): it is not
    the same at every width (a verify step's drafting and syncs cost the same whatever its
    width, so a narrow one costs more per position)."""

    seconds: float | None = None
    since: int = 0
    wait: int = VERIFY_REFRESH
    probing: bool = False
    widths: dict[int, float] = field(default_factory=dict)

    def per_position(self, width: int) -> float | None:
        """What a verified position adds at `width`, in plain steps: its own average, else
        the nearest measured width's (None: none measured)."""
        if not self.widths:
            return None
        if width in self.widths:
            return self.widths[width]
        return self.widths[min(self.widths, key=lambda w: (abs(w - width), -w))]

    @property
    def due(self) -> bool:
        """Worth measuring again, and no verify step started since that will measure it (its
        time is known only after the next step's choice: one step re-measures, not two)."""
        return self.since >= self.wait and not self.probing

    def verified(
        self, seconds: float, upper: bool = False, cap: int = VERIFY_REFRESH_MAX, width: int = 1
    ) -> None:
        """A verify sample of what a position adds at `width`: a re-measurement not markedly
        cheaper than that width's estimate waits longer for the next, up to `cap` steps.
        `upper`: the step also did other work (new rows' priming, a prefill, its shape's
        first kernels), so `seconds` bounds the cost from above: taken only where it shows
        verifying markedly cheaper than estimated, else it counts as a re-measurement that
        found it no cheaper, without moving the estimate."""
        old = self.per_position(width)
        due = self.since >= self.wait
        dearer = old is not None and seconds >= (1 - AGREE) * old
        if not upper or (old is not None and not dearer):
            self.widths[width] = _ewma(self.widths.get(width), seconds)
        self.since = 0
        if old is not None and due:
            longest = max(cap, VERIFY_REFRESH_MAX)
            self.wait = min(2 * self.wait, longest) if dearer else VERIFY_REFRESH


Shape = tuple[int, int, str]  # rows, width, drafters (StepCosts.started)
LOOKED = "looked"  # a plain step's drafters string when prompt lookup read its tokens


class StepCosts:
    """Measured cost of a step by shape (rows x width, and which drafters it asked: `kinds`,
    e.g. "mtp"; "" for prompt lookup alone) relative to a plain step over as many rows; the
    one place where step times are kept. Pure Python, no mlx."""

    def __init__(self) -> None:
        self._plain: dict[int, _Measured] = {}  # rows -> a plain step's seconds
        # rows -> a plain step's seconds after prompt lookup read the sampled tokens and
        # found nothing to verify (the sync mlx-lm's plain step avoids: `look_cost`)
        self._looked: dict[int, _Measured] = {}
        self._extra: dict[tuple[int, str], _Measured] = {}  # what a verified position adds
        # The last step's shape, start, and whether it did more than its shape's work.
        self._last: tuple[Shape, float, bool] | None = None
        self._seen: set[Shape] = set()  # shapes that ran once (the first builds kernels)

    def started(
        self, rows: int, width: int, at: float, kinds: str = "", looked: bool = False
    ) -> None:
        """A step of this shape starts at `at` (perf_counter): the previous step took from its
        own start to now, the work around it included (mlx-lm runs a plain step's forward
        behind the engine's per-step work, a verify step before it). `looked`: a plain step
        whose sampled tokens were read for prompt lookup (measured apart: `look_cost`)."""
        last = self._last
        if last is not None:  # a shape's first forward also builds its kernels
            (last_rows, last_width, asked), began, spoilt = last
            upper = spoilt or last[0] not in self._seen
            self._seen.add(last[0])
            self.observe(last_rows, last_width, at - began, kinds=asked, upper=upper)
        shape = (rows, width, kinds if width else LOOKED if looked else "")
        self._last = (shape, at, False)
        self._plain.setdefault(rows, _Measured()).since += 1
        for (count, offered), extra in self._extra.items():
            mine = count == rows and offered == kinds
            extra.since += mine
            extra.probing = mine and width > 0 and extra.since >= extra.wait

    def pause(self) -> None:
        """Steps are not timed for a while: the last one's time is no sample."""
        self._last = None

    def spoil(self) -> None:
        """The step just started also did other work (a prefill, new rows' priming): its time
        bounds its shape's cost from above (_Measured.verified)."""
        if self._last is not None:
            self._last = (self._last[0], self._last[1], True)

    def observe(
        self, rows: int, width: int, seconds: float, kinds: str = "", upper: bool = False
    ) -> None:
        """A step of this shape took `seconds`; `upper`: at most (spoil)."""
        plain = self._plain.setdefault(rows, _Measured())
        if width == 0 and kinds == LOOKED:
            if not upper:
                looked = self._looked.setdefault(rows, _Measured())
                looked.seconds = _ewma(looked.seconds, seconds)
        elif width == 0 and not upper:
            plain.seconds, plain.since = _ewma(plain.seconds, seconds), 0
        elif width and plain.seconds is not None:
            extra = self._extra.setdefault((rows, kinds), _Measured())
            cap = round(PROBE_STEPS * (seconds / plain.seconds - 1))
            # In plain steps of the time: a machine whose speed changes (a busy host) moves
            # both, and a verify measured at one speed still holds at the other.
            per = max(seconds - plain.seconds, 0.0) / width / plain.seconds
            extra.verified(per, upper, cap, width)
            if not upper and seconds < (1 - AGREE) * plain.seconds:
                # A wider forward is never markedly cheaper: stalls inflated the plain
                # estimate. Measure it again.
                plain.since = REFRESH

    def look_cost(self, rows: int) -> float:
        """What reading the sampled tokens adds to a plain step over `rows` rows, in plain
        steps (0 until both are measured: a batch then looks, and so measures it)."""
        plain, looked = self._plain.get(rows), self._looked.get(rows)
        if plain is None or not plain.seconds or looked is None or looked.seconds is None:
            return 0.0
        return max(looked.seconds / plain.seconds - 1.0, 0.0)

    def needs_plain(self, rows: int) -> bool:
        """The plain step over `rows` rows is unmeasured or due for a new measurement."""
        plain = self._plain.get(rows)
        return plain is None or plain.seconds is None or plain.since >= REFRESH

    def ratio(self, rows: int, width: int, kinds: str = "") -> float:
        """r_rows(width): a step of this shape over a plain step over as many rows. A row
        count never measured verifying with these drafters takes the nearest one's slope,
        else PRIOR_SLOPE. One due for a new measurement (after VERIFY_REFRESH steps, twice
        as long after each one that found it no cheaper, up to VERIFY_REFRESH_MAX; steps count
        only where its drafters were on offer) counts its slope over 1 + the waits elapsed:
        optimistic, so that a step measures it again, but a verify far dearer than its
        tokens is retried only as rarely as it is dear."""
        slope = self._slope(rows, kinds, width)
        extra = self._extra.get((rows, kinds))
        if extra is not None and extra.due:
            slope /= 1 + extra.since // extra.wait
        return 1.0 + slope * width

    def _slope(self, rows: int, kinds: str, width: int) -> float:
        """What a verified position adds at `width`, in plain steps (_Measured.per_position)."""
        for count in sorted(self._extra, key=lambda key: abs(key[0] - rows)):
            per = self._extra[count].per_position(width) if count[1] == kinds else None
            if per is not None:
                return per
        return PRIOR_SLOPE


class DraftPolicy:
    """Chooses each step's verify width (module docstring: the rule and why)."""

    def __init__(self, costs: StepCosts | None = None) -> None:
        self.costs = costs if costs is not None else StepCosts()

    def width(
        self,
        rows: int,
        offers: list[tuple[Acceptance, int]],
        most: int,
        least: int = 0,
        kinds: str = "",
    ) -> int:
        """The verify width for a step over `rows` rows, where each drafting row offers a
        draft of some length with its acceptance record: from `least` (rows that must
        verify their drafts) to `most`; 0 is a plain step. `kinds`: the drafters a verify
        step would ask (StepCosts)."""
        if not offers or most <= 0 or (least == 0 and self.costs.needs_plain(rows)):
            return least
        # Runs every step a row offers (parked ones too), so it is kept cheap: a row gains
        # fewer than w tokens at width w, so where a verified position costs every row's
        # step 1/rows of a plain step or more at every width, no width beats plain.
        if least == 0:
            cheapest = min((self.costs.ratio(rows, w, kinds) - 1.0) / w for w in range(1, most + 1))
            if rows * cheapest >= len(offers):
                return 1 if self._probes(rows, offers, kinds) else 0
        odds = [(acc.p, length) for acc, length in offers]  # each row's p once
        best, best_score = least, self._score(rows, odds, least, kinds)
        for w in range(least + 1, most + 1):
            ratio = self.costs.ratio(rows, w, kinds)
            gains = [_expected(p, min(length, w)) for p, length in odds]
            score = (rows + sum(gains)) / ratio
            # No drafting row may expect less than a token per plain step's time at this
            # width: a batch that nothing refills ends with its slowest rows, which a width
            # paid for by the other rows' good drafts would slow.
            if score > best_score and all(1 + gain >= ratio for gain in gains):
                best, best_score = w, score
        return 1 if best == 0 and self._probes(rows, offers, kinds) else best

    def _probes(self, rows: int, offers: list[tuple[Acceptance, int]], kinds: str) -> bool:
        """A row none of whose drafts was verified yet is tried once at width 1 where that
        would pay were its drafts right (the prior alone may never verify it, and so never
        learn that it accepts everything); not where the measured cost says even that loses."""
        untried = sum(not acc.tried for acc, _ in offers)
        if not untried:
            return False
        tokens = rows + untried + sum(acc.expected(1) for acc, _ in offers if acc.tried)
        return tokens > rows * self.costs.ratio(rows, 1, kinds)

    def score(
        self, rows: int, offers: list[tuple[Acceptance, int]], width: int, kinds: str = ""
    ) -> float:
        """Expected tokens per plain step's time of a step of this width (plain: `rows`)."""
        return self._score(rows, [(acc.p, length) for acc, length in offers], width, kinds)

    def _score(self, rows: int, odds: list[tuple[float, int]], width: int, kinds: str) -> float:
        """Expected tokens per plain step's time of a step of this width."""
        tokens = rows + sum(_expected(p, min(length, width)) for p, length in odds)
        return tokens / self.costs.ratio(rows, width, kinds)


def draft_policy_every() -> bool:
    """MLXD_DRAFT_POLICY: `every` verifies every draft, `measured` (default) follows the rule."""
    mode = setting("draft_policy").strip().lower()
    if mode not in ("measured", "every"):
        raise ValueError(f"MLXD_DRAFT_POLICY must be 'measured' or 'every', not {mode!r}")
    return mode == "every"


def _expected(p: float, k: int) -> float:
    """p + p^2 + ... + p^k: the expected accepted tokens of a k-token draft."""
    if k <= 0:
        return 0.0
    return float(k) if p >= 1.0 else p * (1.0 - p**k) / (1.0 - p)


def _ewma(old: float | None, new: float) -> float:
    if old is None:
        return new
    return old + _ALPHA * ((min(new, _OUTLIER * old) if old > 0 else new) - old)
