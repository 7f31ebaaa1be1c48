"""`telemetry deploy` stopped by a signal in each step, then run again (tests/journey/world.py; the
first deployment and reruns after a lost answer: test_first_deployment.py)."""

from __future__ import annotations

import re

import pytest

from telemetry.deploy import command as deploy
from tests.journey.test_first_deployment import check_one_of_each, dev, fault_at  # noqa: F401 (dev: a fixture)

pytestmark = [pytest.mark.journey, pytest.mark.filterwarnings("ignore:Tried to parse AWS")]


class Killed(BaseException):
    """The process ended by SIGTERM's default action, inside the call in flight: nothing of the run
    goes on (no handler of cli.main sees it; Python's finally blocks do run here, which a real
    SIGTERM skips, so a kill is harsher than this, never gentler, for what the account holds)."""


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("step", deploy.STEPS)
def test_a_rerun_after_a_signal_in_each_step_finishes_with_nothing_made_twice(step, signal, dev, capsys, monkeypatch):
    """Ctrl-C (SIGINT: KeyboardInterrupt, exit 130) or SIGTERM (the process ends) during the step's
    first AWS call; in the deploy step while the CDK CLI waits on a stack, which CloudFormation goes
    on creating. The same command, run again, finishes."""
    world, stop = dev.world, KeyboardInterrupt if signal == "SIGINT" else Killed
    if step == "deploy":
        dev.deployer.interrupt[f"{dev.config.stack_prefix}-ServiceFabric"] = stop
    else:
        first = fault_at(world, step, re.compile("."))
        world.interrupt_in = lambda name: stop if first(name) else None
    if stop is Killed:
        with pytest.raises(Killed):
            dev.deploy(capsys, monkeypatch)
    else:
        code, out, err = dev.deploy(capsys, monkeypatch)
        assert code == 130, out + err
    world.interrupt_in = None
    code, out, err = dev.deploy(capsys, monkeypatch)
    assert code == 0, out + err
    check_one_of_each(dev)
