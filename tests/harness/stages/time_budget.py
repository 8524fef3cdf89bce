"""make test's time guard: CI gives a run a fixed budget (90 minutes) and kills it silently when it is spent.

The record (stage_seconds.json, next to this file) holds each stage's time in a quiet clean-clone run. As the run goes,
the stages that ended say how much slower than the record this machine is today (the slowness); what is left is the
record's time for the stages left, times that slowness, laid out as run_stages.py runs them (a group's lanes side by
side). The guard judges only once the ended stages measured enough of the record (JUDGED_FROM), and stops early only
where what is used plus what is left, even TOLERANCE faster than predicted, does not fit the budget: a false stop loses
a run that would have passed, while a run that merely comes close is still stopped, with the same message, when the
budget itself is spent (out_of_time). Either way the run fails, naming the slow stages: the guard never skips a check
and passes.
"""
import json
import pathlib
import time

RECORD = pathlib.Path(__file__).resolve().with_name("stage_seconds.json")
CI_SECONDS = 90 * 60
# Stages whose time says what the machine had cached (a venv, Docker, images), not how fast it is.
SETUP = ("venv", "docker", "images")
# A stage shorter than this in the record says little about the machine's speed.
MEASURED_FROM = 10
# How much of the record the ended stages must cover before the guard trusts its prediction: with nothing measured,
# the prediction is the record itself, whose own run may have been slower than today's (CI stopped at 0 s on one).
JUDGED_FROM = 600
# How far a prediction may err: one stage's time varies by about this much between runs on the same machine (0.85x to
# 1.15x of its record in the recorded runs), so a stop before the budget is spent needs a miss beyond it.
TOLERANCE = 0.15
# Time to stop the running stages and print the summary before CI's own limit.
RESERVE = 60


def load_record(path=RECORD):
    return {name: float(seconds) for name, seconds in json.loads(pathlib.Path(path).read_text())["seconds"].items()}


def minutes(seconds):
    return "%.0f min" % (seconds / 60.0) if seconds >= 600 else "%.0f s" % seconds


class Budget(object):
    """The budget of one run: what ended, how slow the machine is against the record, and what is predicted left."""

    def __init__(self, record, limit=CI_SECONDS, clock=time.monotonic):
        self.record, self.limit, self.clock = record, limit, clock
        self.started = clock()
        self.ended = {}  # stage -> seconds it took

    def used(self):
        return self.clock() - self.started

    def end(self, name, seconds):
        self.ended[name] = seconds

    def measured(self):
        """The ended stages that say how fast the machine is: (name, seconds, recorded seconds)."""
        return [(name, seconds, self.record[name]) for name, seconds in self.ended.items()
                if name not in SETUP and self.record.get(name, 0) >= MEASURED_FROM]

    def judged(self):
        """Whether the ended stages cover enough of the record to say how fast this machine is today."""
        return sum(m[2] for m in self.measured()) >= JUDGED_FROM

    def slowness(self):
        """How many times the record's time the ended stages took (1.0 before any says)."""
        measured = self.measured()
        if not measured:
            return 1.0
        return sum(m[1] for m in measured) / sum(m[2] for m in measured)

    def expected(self, name):
        """A stage's predicted time today; a stage the record lacks counts at its longest recorded stage."""
        return self.slowness() * self.record.get(name, max(self.record.values() or [0]))

    def left(self, plan):
        """Predicted seconds for the plan: a list of steps run one after another, each a stage name or a group
        (at_once, lanes), a lane being a list of (stage name, seconds it has already run) run one after another.
        A group's time is its longest lane, or its work spread over at_once workers where that is longer."""
        total = 0.0
        for step in plan:
            if isinstance(step, str):
                total += self.expected(step)
                continue
            at_once, lanes = step
            times = [sum(max(self.expected(name) - ran, 0.0) for name, ran in lane) for lane in lanes]
            total += max(times + [0.0, sum(times) / at_once])
        return total

    def fits(self, plan):
        """False only where the stages left, judged and even TOLERANCE faster than predicted, run past the budget."""
        if not self.judged():
            return True
        return self.used() + (1.0 - TOLERANCE) * self.left(plan) <= self.limit - RESERVE

    def share(self, seconds, plan):
        """What a stage's end line adds: its share of the budget, how much is used and what is predicted left."""
        return "%.0f%% of the %s budget; %.0f%% used, about %s left at %.1fx the record" % (
            100.0 * seconds / self.limit, minutes(self.limit), 100.0 * self.used() / self.limit,
            minutes(self.left(plan)), self.slowness())

    def slowest(self, count=3):
        measured = sorted(self.measured(), key=lambda m: -m[1] / m[2])
        return ["%s %.0f s (recorded %.0f s, %.1fx)" % (name, seconds, recorded, seconds / recorded)
                for name, seconds, recorded in measured[:count]]

    def stop_message(self, plan, names_left):
        return ("time guard: STOPPING make test. %s of CI's %s are used, and the stages left (%s) took %s in the record "
                "(%s): at this run's %.1fx they would need about %s, past the budget even %d%% faster. Slowest so far: %s. "
                "This is a failure, not a skip: nothing after this point was checked. Re-run on a quieter machine, or "
                "make the slow stages cheaper and re-record their times (docs/testing.md, the time guard)."
                % (minutes(self.used()), minutes(self.limit), ", ".join(names_left),
                   minutes(sum(self.record.get(n, 0) for n in names_left)), RECORD.name, self.slowness(),
                   minutes(self.left(plan)), round(100 * TOLERANCE), "; ".join(self.slowest()) or "none measured yet"))

    def out_of_time(self):
        """True once the budget, less the time to stop cleanly, is spent: a stage still running is then stopped."""
        return self.used() > self.limit - RESERVE


def write_record(results, note, path=RECORD):
    """The record from a whole run that passed: each stage's seconds, and where they were measured."""
    record = {"measured": note, "seconds": {name: round(seconds) for name, returncode, seconds in results}}
    pathlib.Path(path).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
