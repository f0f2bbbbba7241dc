import pytest

from keras_gen.serving import APIError
from keras_gen.serving.response_store import ResponseStore


@pytest.mark.only_backend("jax")
def test_the_store_keeps_the_last_responses_used():
    store = ResponseStore(size=3)
    for i in range(3):
        store.put(f"resp_{i}", [{"role": "user", "content": str(i)}])
    assert store.get("resp_0") == [{"role": "user", "content": "0"}]  # now newest
    store.put("resp_3", [])
    with pytest.raises(APIError, match="keeps the last 3") as error:
        store.get("resp_1")
    assert error.value.status == 404
    assert store.get("resp_0") and store.get("resp_3") == []


@pytest.mark.only_backend("jax")
def test_the_store_keeps_a_bounded_number_of_characters():
    store = ResponseStore(size=100, max_chars=1000)
    store.put("resp_big", [{"role": "user", "content": "x" * 2000}])
    with pytest.raises(APIError):  # longer than the whole store: not kept
        store.get("resp_big")
    for i in range(20):
        store.put(f"resp_{i}", [{"role": "user", "content": "y" * 100}])
    kept = [i for i in range(20) if _kept(store, f"resp_{i}")]
    assert kept == list(range(20 - len(kept), 20)) and 0 < len(kept) < 10


def _kept(store, response_id):
    try:
        store.get(response_id)
        return True
    except APIError:
        return False
