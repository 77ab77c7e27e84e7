"""The continuous scheduler's join policy: while rows run, queued requests join in groups (one eager prefill
for several requests), or once the oldest has waited ``join_wait_ms``; an idle engine takes them at once."""

import time

import pytest

from textwm.generation.engine import DecodeEngine
from textwm.generation.settings import DecodeSettings
from textwm.models.checkpoint import load_model
from textwm.serving.metrics import ServerMetrics
from textwm.serving.scheduler import ContinuousScheduler, Intake, Work
from textwm.serving.streaming import RowTokens

SETTINGS = DecodeSettings(gen_length=40, temperature=0.0)


@pytest.fixture(scope="module")
def ar(tiny_ar_dir):
    return load_model(tiny_ar_dir, device="cpu", dtype="float32")


def scheduler(lm, intake, **kwargs):
    def make_engine():
        return DecodeEngine(lm.model, lm.spec, max_rows=8, max_len=64)
    return ContinuousScheduler(make_engine, intake, max_batch_size=8, metrics=ServerMetrics(), **kwargs)


def work(inbox):
    return Work(prompts=[[5, 6, 7]], settings=SETTINGS, post=inbox.append)


def test_queued_requests_join_running_rows_in_groups(ar):
    intake, inbox = Intake(64), []
    sched = scheduler(ar, intake, join_min_rows=3, join_wait_ms=60_000)
    assert sched.join_min_rows == 3
    intake.queue.put(work(inbox))
    sched.run_once()                       # idle engine: joins at once
    assert sched.engine.num_active == 1
    intake.queue.put(work(inbox))
    intake.queue.put(work(inbox))
    sched.run_once()                       # 2 waiting < 3: they wait
    assert sched.engine.num_active == 1 and intake.depth == 2
    intake.queue.put(work(inbox))
    sched.run_once()                       # 3 waiting: all join
    assert sched.engine.num_active == 4 and intake.depth == 0
    while sched.engine.num_active:
        sched.run_once()
    finished = [m for m in inbox if isinstance(m, RowTokens) and m.finished is not None]
    assert len(finished) == 4


def test_the_oldest_request_joins_after_join_wait_ms(ar):
    intake, inbox = Intake(64), []
    sched = scheduler(ar, intake, join_min_rows=4, join_wait_ms=30)
    intake.queue.put(work(inbox))
    sched.run_once()
    intake.queue.put(work(inbox))
    sched.run_once()
    assert sched.engine.num_active == 1    # too soon, too few
    time.sleep(0.05)
    sched.run_once()
    assert sched.engine.num_active == 2


def test_default_group_is_an_eighth_of_the_batch_and_bad_values_are_refused(ar):
    assert scheduler(ar, Intake(4)).join_min_rows == 1      # 8 rows / 8
    with pytest.raises(ValueError, match="join_min_rows"):
        scheduler(ar, Intake(4), join_min_rows=-1)
