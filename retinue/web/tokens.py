"""The per-page action token: made for each page load, embedded in the page, checked on every POST.

A page of the view gets a fresh token each time it is served (a ``<meta>``
tag: the page's script reads it and sends it in the ``X-Retinue-Action-Token``
header of every action). A token is a random nonce and its HMAC under a key
the server draws when it starts, so the server keeps no table of tokens (no
bound to run into, nothing another site can flush by loading the page): a
token is valid for as long as that server runs, and never for another one.

A cookie alone is never enough to act: another site's page can make a
browser send the view's cookies, but it cannot read the view's page, so it
cannot know a token (and the custom header makes a cross-site request
preflighted, which the view does not answer).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

__all__ = ["TOKEN_HEADER", "PageTokens"]

TOKEN_HEADER = "x-retinue-action-token"
"""The request header that carries a page's action token."""
_NONCE_BYTES = 18
_MAC_BYTES = 24
_MAX_TOKEN = 128  # longer than any token this module makes


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


class PageTokens:
    """Makes and checks per-page tokens under a key drawn when it is built."""

    def __init__(self) -> None:
        """Draw the key; tokens made by another instance (another server) never match."""
        self._key = secrets.token_bytes(32)

    def _mac(self, nonce: str) -> str:
        digest = hmac.new(self._key, nonce.encode("ascii"), hashlib.sha256).digest()
        return _b64(digest[:_MAC_BYTES])

    def issue(self) -> str:
        """Return a new token (URL- and header-safe text)."""
        nonce = _b64(secrets.token_bytes(_NONCE_BYTES))
        return f"{nonce}.{self._mac(nonce)}"

    def valid(self, token: str | None) -> bool:
        """Whether ``token`` was issued by this instance (compared in constant time)."""
        if not token or len(token) > _MAX_TOKEN or not token.isascii():
            return False
        nonce, dot, mac = token.partition(".")
        if not dot or not nonce:
            return False
        return hmac.compare_digest(mac.encode("ascii"), self._mac(nonce).encode("ascii"))
