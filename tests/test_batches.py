"""The training batch producers: in line and in a thread they make the same batches in the same order,
each with the state that restarts the maker right after it, so a resumed run continues exactly."""

import pytest
import torch

from restore.training.batches import BatchMaker, BatchSpec, batches
from tests.test_trainer import trainer


def spec(folder, **over) -> BatchSpec:
    return BatchSpec(**{"data_dir": str(folder), "device": "cpu", "window": 16000 * 4, "sample_rate": 16000,
                        "hop": 256, "max_tokens": 64, "batch": 2, "p_uncond": 0.1, "p_drop_text": 0.5,
                        "pad_text": True, "seed": 3, **over})


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def reference(train_data_dir):
    """The first four batches made in line, and the maker's state after each."""
    maker = BatchMaker(spec(train_data_dir))
    out = []
    for _ in range(4):
        b = maker()
        out.append((b, maker.state()))
    return out


@pytest.mark.parametrize("producer", ["inline", "thread"])
def test_each_producer_makes_the_same_batches_with_states_that_restart_the_maker(train_data_dir, reference,
                                                                                 producer):
    it = batches(BatchMaker(spec(train_data_dir)), producer)
    got = [next(it) for _ in range(4)]
    it.close()
    for (b, state), (ref, _) in zip(got, reference):
        assert same(b, ref)
    again = BatchMaker(spec(train_data_dir))
    again.set_state(got[1][1])  # after batch 2: the maker makes batch 3 next
    assert same(again(), reference[2][0])


def test_a_run_resumed_from_a_checkpoint_trains_on_the_batch_that_came_next(train_data_dir, tmp_path):
    tr = trainer(train_data_dir, tmp_path / "run", producer="thread")
    it = tr.batches()
    for _ in range(3):
        tr.train_step(next(it))
    tr.save_checkpoint()  # the producer is ahead by now; the checkpoint is not
    fourth = next(it)
    it.close()
    again = trainer(train_data_dir, tmp_path / "run", producer="thread")
    assert again.resume() and again.step == 3
    assert same(again.batch(), fourth)


def test_an_unknown_producer_is_refused(train_data_dir, tmp_path):
    with pytest.raises(ValueError, match="inline, thread"):
        trainer(train_data_dir, tmp_path / "run", producer="gpu")


def test_a_batch_state_from_the_torch_generator_is_refused_with_a_reason(train_data_dir):
    maker = BatchMaker(spec(train_data_dir))
    old = {"gen": torch.Generator().manual_seed(1).get_state(), "rng": maker.state()["rng"]}
    with pytest.raises(ValueError, match="cannot resume exactly"):
        maker.set_state(old)


class _Watched:
    """A maker that records whether the lock was held at each call."""

    def __init__(self, maker, lock):
        self.maker, self.lock, self.held = maker, lock, []
        self.device = maker.device

    def __call__(self):
        self.held.append(self.lock.locked())
        return self.maker()

    def state(self):
        return self.maker.state()


def test_the_thread_producer_makes_batches_only_under_the_gpu_lock(train_data_dir):
    """Whoever holds the lock (the trainer, while CUDA graphs are captured) keeps the producer from
    making a batch; otherwise it makes the same batches as without a lock."""
    import threading
    import time

    lock = threading.Lock()
    maker = _Watched(BatchMaker(spec(train_data_dir)), lock)
    it = batches(maker, "thread", depth=1, gpu_lock=lock)
    first = next(it)
    with lock:  # a batch in the making holds the lock, so none is under way once we have it
        made = len(maker.held)
        time.sleep(0.3)
        assert len(maker.held) == made
    second = next(it)
    it.close()
    assert all(maker.held)
    ref = BatchMaker(spec(train_data_dir))
    assert same(first[0], ref()) and same(second[0], ref())


def test_the_trainer_holds_the_producer_off_only_in_its_first_steps(train_data_dir, tmp_path):
    import contextlib
    import threading

    from restore.training.trainer import CAPTURE_STEPS

    tr = trainer(train_data_dir, tmp_path / "run", producer="thread", compile_mode="reduce-overhead")
    assert tr.gpu_lock is None  # no CUDA graphs on the CPU: nothing to guard
    tr.gpu_lock = threading.Lock()  # as on a GPU
    assert tr.capture_guard(0) is tr.gpu_lock and tr.capture_guard(CAPTURE_STEPS - 1) is tr.gpu_lock
    assert isinstance(tr.capture_guard(CAPTURE_STEPS), contextlib.nullcontext)
