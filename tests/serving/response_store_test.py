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
