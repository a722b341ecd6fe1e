import pytest

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


def test_publishable_cuts_local_paths_and_leaves_urls_and_fractions():
    from xmcbench.redact import publishable

    data = {
        "command": "xmcbench run /home/me/recipes/dexml.yaml --set x=1",
        "encoder": "/srv/models/tiny-bert/",
        "card": "- **Initial encoder:** `~/models/bert`; propensity A/B 0.55/1.50",
        "urls": ["https://huggingface.co/org/name", "hf://org/name@main", "http://127.0.0.1:8080/a/b"],
        "token": "hf_ZYXWVUTSRQPONMLK in /tmp/x",
    }
    out = publishable(data)
    assert out["command"] == "xmcbench run <local>/dexml.yaml --set x=1"
    assert out["encoder"] == "<local>/tiny-bert"
    assert out["card"] == "- **Initial encoder:** `<local>/bert`; propensity A/B 0.55/1.50"
    assert out["urls"] == data["urls"]
    assert out["token"] == "hf_*** in <local>/x"


@pytest.mark.parametrize(
    ("text", "published"),
    [
        ("source: file:///home/alice/data/eurlex.zip", "source: <local>/eurlex.zip"),
        ("/Users/Alice Smith/models/bert", "<local>/bert"),  # a value that is one path, spaces and all
        ("name: '/Users/Alice Smith/models/bert'\nlr: 0.1\n", "name: '<local>/bert'\nlr: 0.1\n"),
        ("  - /home/a b/c.yaml  # note\n", "  - <local>/c.yaml  # note\n"),
        ("encoder: {name: /home/x/enc, max_length: 16}\n", "encoder: {name: <local>/enc, max_length: 16}\n"),
        ("a: /x/y\nb: /z/w\n", "a: <local>/y\nb: <local>/w\n"),
        ("k: a/b\nurl: https://h.co/a/b\nP@1: 30/40\n", "k: a/b\nurl: https://h.co/a/b\nP@1: 30/40\n"),
        ("error: cannot open '/Users/Alice Smith/data.npz'", "error: cannot open '<local>/data.npz'"),
        ('encs: ["/Users/Alice Smith/bert", x]', 'encs: ["<local>/bert", x]'),
        ("m: {name: '/home/Alice Smith/bert'}", "m: {name: '<local>/bert'}"),
        ('enc: "/Users/Alice O\'Brien/bert"', 'enc: "<local>/bert"'),
        ("/home/u/a.txt and /home/u/b.txt are missing", "<local>/a.txt and <local>/b.txt are missing"),
        ("train loss - / not computed", "train loss - / not computed"),
    ],
)
def test_publishable_cuts_file_urls_and_paths_with_spaces(text, published):
    from xmcbench.redact import publishable

    assert publishable(text) == published


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("HTTPS://u:pw123456@host/x", "https://***@host/x"),  # any case
        ("ftp://u:ftppw9876@host/y", "ftp://***@host/y"),  # any scheme
        ("s3://AKIA:sec12345@bucket/k", "s3://***@bucket/k"),
        ("postgresql://u:pw@db:5432/x", "postgresql://***@db:5432/x"),
        ("https://u:pw#123456@host/x", "https://***@host/x"),  # a raw # / ? in the password ends no host
        ("https://u:pw/123456@host/x", "https://***@host/x"),
        ("https://u:pw?123456@host/x", "https://***@host/x"),
        ("https://TOKEN123456@github.com/o/r", "https://***@github.com/o/r"),
        ("https://medium.com/@user/post", "https://medium.com/@user/post"),  # an @ in a path is no password
        ("hf://org/model@rev", "hf://org/model@rev"),
    ],
)
def test_credentials_in_any_url_are_masked(text, masked):
    assert redact(f"mirror {text} or") == f"mirror {masked} or"
