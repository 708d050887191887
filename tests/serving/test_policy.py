"""The server policy's rules, without a server: loopback aliases, binds, Host, Origin, tokens."""

from __future__ import annotations

import pytest

from retinue import ArgumentTypeError, InvalidArgument
from retinue.serving import (
    ServerPolicy,
    host_of,
    is_loopback,
    is_wildcard,
    split_address,
)

ALIASES = ["localhost", "LocalHost", "127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "[::1]"]


@pytest.mark.parametrize("host", [*ALIASES, "::ffff:127.0.0.9"])
def test_every_loopback_alias_is_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    ["evil.example", "localhost.evil.example", "128.0.0.1", "0.0.0.0", "::", "10.0.0.5", "127.1"],
)
def test_other_names_are_not(host: str) -> None:
    assert not is_loopback(host)


def test_wildcards() -> None:
    assert is_wildcard("0.0.0.0") and is_wildcard("::") and is_wildcard("[::]") and is_wildcard("")
    assert not is_wildcard("127.0.0.1") and not is_wildcard("localhost")


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.2:8321", "127.0.0.2"),
        ("[::1]:8321", "::1"),
        ("[::1]", "::1"),
        ("LOCALHOST", "localhost"),
        ("retinue.example.com:443", "retinue.example.com"),
        ("evil.example:x", None),
        ("[evil.example]:1", None),
        ("[::1]x", None),
        ("a b", None),
        ("", None),
    ],
)
def test_host_headers_are_parsed(header: str, host: str | None) -> None:
    assert host_of(header) == host


def test_addresses_split_into_host_and_port() -> None:
    assert split_address("[::1]:0", "127.0.0.1", 8321) == ("::1", 0)
    assert split_address("127.0.0.2:9", "127.0.0.1", 8321) == ("127.0.0.2", 9)
    assert split_address("9000", "127.0.0.1", 8321) == ("127.0.0.1", 9000)
    assert split_address(":9000", "127.0.0.1", 8321) == ("127.0.0.1", 9000)
    assert split_address("localhost", "127.0.0.1", 8321) == ("localhost", 8321)
    for bad in ("127.0.0.1:http", "[::1", "1:70000", "[::1]x"):
        with pytest.raises(InvalidArgument):
            split_address(bad, "127.0.0.1", 8321)


@pytest.mark.parametrize("bound", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_server_answers_every_loopback_alias_and_nothing_else(bound: str) -> None:
    policy = ServerPolicy.for_bind(bound, 8321)
    for host in ("127.0.0.1:8321", "127.0.0.7", "localhost:1", "[::1]:8321"):
        assert policy.host_allowed(host), host
    for refused in ("evil.example", "evil.example:8321", "127.0.0.1.evil.example", None, ""):
        assert not policy.host_allowed(refused), refused
    assert policy.origin_allowed(None)  # same-origin requests and non-browser clients
    for origin in ("http://127.0.0.1:8321", "http://localhost:6274", "https://[::1]:1"):
        assert policy.origin_allowed(origin), origin
    for origin in ("http://evil.example", "null", "file://", "ftp://127.0.0.1", "http://[::1"):
        assert not policy.origin_allowed(origin), origin


def test_a_wildcard_bind_needs_a_token_and_the_names_clients_use() -> None:
    with pytest.raises(InvalidArgument, match=r"without a bearer token: set \$RETINUE_WEB_TOKEN"):
        ServerPolicy.for_bind("0.0.0.0", 1, token_source="$RETINUE_WEB_TOKEN")
    with pytest.raises(InvalidArgument, match="--allowed-host NAME"):
        ServerPolicy.for_bind("::", 1, token="t0ken")
    policy = ServerPolicy.for_bind(
        "0.0.0.0", 8321, token="t0ken", allowed_hosts=["Retinue.Example.com", "[2001:db8::1]"]
    )
    assert policy.host_allowed("retinue.example.com:8321")
    assert policy.host_allowed("[2001:db8:0::1]:8321")  # compared as an address
    assert policy.host_allowed("127.0.0.1:8321")
    assert not policy.host_allowed("0.0.0.0:8321") and not policy.host_allowed("evil.example")
    assert policy.origin_allowed("https://retinue.example.com")
    assert policy.url("/mcp") == "http://retinue.example.com:8321/mcp"
    assert policy.describe() == "0.0.0.0:8321 (every interface)"


def test_a_non_loopback_address_needs_a_token_and_answers_to_itself() -> None:
    with pytest.raises(InvalidArgument, match="without a bearer token"):
        ServerPolicy.for_bind("192.0.2.7", 1)
    policy = ServerPolicy.for_bind("192.0.2.7", 80, token="t0ken")
    assert policy.host_allowed("192.0.2.7") and not policy.host_allowed("192.0.2.8")
    assert policy.url() == "http://192.0.2.7:80/"


def test_bad_tokens_and_names_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="visible ASCII"):
        ServerPolicy.for_bind("127.0.0.1", 1, token="has space")
    with pytest.raises(InvalidArgument, match="visible ASCII"):
        ServerPolicy.for_bind("127.0.0.1", 1, token="")
    with pytest.raises(ArgumentTypeError):
        ServerPolicy.for_bind("127.0.0.1", 1, token=5)  # type: ignore[arg-type]
    for name in ("http://x.example", "x.example:80", "bad_name", "a..b"):
        with pytest.raises(InvalidArgument, match="not a host name or address"):
            ServerPolicy.for_bind("127.0.0.1", 1, allowed_hosts=[name])
    with pytest.raises(ArgumentTypeError):
        ServerPolicy.for_bind("127.0.0.1", 1, allowed_hosts="x.example")


def test_the_bearer_scheme_is_case_insensitive_and_the_token_exact() -> None:
    policy = ServerPolicy.for_bind("127.0.0.1", 1, token="s3cret")
    for header in ("Bearer s3cret", "bearer s3cret", "BEARER   s3cret ", "  bEaReR s3cret"):
        assert policy.authorized(header), header
    for wrong in (None, "", "s3cret", "Basic s3cret", "Bearer S3CRET", "Bearer s3cret2", "Bearer"):
        assert not policy.authorized(wrong), wrong
    assert ServerPolicy.for_bind("127.0.0.1", 1).authorized(None)  # no token, nothing asked
    assert ServerPolicy.for_bind("[::1]", 9).url() == "http://[::1]:9/"
