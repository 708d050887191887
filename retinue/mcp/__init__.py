"""``retinue mcp``: a store's durable trees served over the Model Context Protocol.

An MCP client (Claude Code, Codex, an IDE) delegates to a team through tools
(``run_team``, ``spawn``, ``wait``, ``send``, ``tree``, ``inspect``,
``interrupt``, ``close``, ``resume``) and reads ``retinue://tree`` and
``retinue://agent/{path}``. Built on the public :class:`~retinue.Runtime`
API only. Importing this package does not import the ``mcp`` SDK; serving does
(``pip install 'retinue[mcp]'``).
"""

from __future__ import annotations

__all__: list[str] = []
