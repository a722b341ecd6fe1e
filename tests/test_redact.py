from xmcbench.redact import redact, redact_data


def test_tokens_urls_and_environment_secrets_are_masked(monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-live-0123456789abcdef")
    text = "hf_abcdefghijklmnop https://user:pw@host/x?token=abc&page=2 key sk-live-0123456789abcdef"
    out = redact(text)
    assert "hf_abcdefghijklmnop" not in out and "pw@" not in out and "abc&" not in out
    assert "sk-live-0123456789abcdef" not in out and "page=2" in out


def test_nested_data_is_masked_keys_too():
    token = "hf_ZYXWVUTSRQPONMLK"
    data = {"description": f"uses {token}", "list": [token, 3], token: {"x": (token,)}}
    out = redact_data(data)
    assert token not in repr(out) and out["list"][1] == 3
