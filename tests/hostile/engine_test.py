"""The engine under many client threads: submit, cancel and close never
break the compiled step, and close ends every request at once."""

import random
import threading
import time

import pytest

from keras_gen.serving import Engine
from keras_gen.serving import EngineClosed
from keras_gen.serving import RequestCancelled
from tests.text_models import tiny_text_lm

TIMEOUT = 300


@pytest.mark.only_backend("jax", "torch", "tensorflow")
def test_threads_submitting_and_cancelling_never_break_the_step():
    # Four slots: a full row bucket of four takes the product form of the
    # torch backend's matrix products (its transposed result once reached
    # a compiled branch in a layout that branch had not been traced with).
    lm = tiny_text_lm(max_sequence_length=128)
    errors, finished = [], []
    with Engine(lm, max_batch_size=4, max_length=64, chunk_size=2) as engine:

        def client(seed):
            rng = random.Random(seed)
            for k in range(5):
                try:
                    handle = engine.submit(
                        f"The for statement {k}",
                        max_new_tokens=rng.randint(2, 12),
                        temperature=rng.choice([0.0, 0.7]),
                        seed=k,
                    )
                    if rng.random() < 0.3:
                        time.sleep(rng.random() * 0.1)
                        handle.cancel()
                    try:
                        record = handle.result(TIMEOUT)
                        assert set(record.finish_reasons) <= {
                            "length",
                            "stop",
                            "cancelled",
                        }
                    except RequestCancelled:
                        assert handle.cancelled
                    finished.append(seed)
                except Exception as error:  # every one is a failure here
                    errors.append(repr(error)[:500])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert not errors, errors
        assert len(finished) == 30

        running = [
            engine.submit("The", max_new_tokens=60, stop_token_ids=[], temperature=0)
            for _ in range(6)
        ]
        next(iter(running[0]))
        began = time.monotonic()
        engine.close(timeout=10)
        for handle in running:
            with pytest.raises(EngineClosed):
                handle.result(10)
        assert time.monotonic() - began < 15
