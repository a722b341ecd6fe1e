"""hub_error_message: one line saying what failed and what to do."""

import httpx2
import pytest

from xmcbench.encoders.hub_ref import hub_error_message


def _wrapped(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except Exception as inner:
            raise RuntimeError("huggingface_hub gave up") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("cause", [httpx2.ReadTimeout("timed out"), httpx2.RemoteProtocolError("peer closed")])
def test_a_download_cut_off_by_the_network_says_so_and_to_retry(cause):
    line = hub_error_message(_wrapped(cause), "download hf://org/model", retry="run it again")
    assert line.startswith("cannot download hf://org/model: the connection to the Hub failed")
    assert type(cause).__name__ in line and line.endswith("run it again")


def test_an_unknown_error_still_names_itself():
    line = hub_error_message(ValueError("odd\nsecond line"), "download hf://org/model")
    assert line == "cannot download hf://org/model: ValueError: odd"
