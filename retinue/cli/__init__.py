"""The retinue command: run agent teams from team files, watch them live, resume them.

Commands:
  demo      run the bundled code-review team on the offline model, in a fresh store
  run       run a team file's lead on a task and draw the tree live
  resume    resume every interrupted agent of a store and wait for the tree to settle
  fork      copy an agent and its subtree as of a past generation (settled)
  tree      print a store's agents by path (read-only; works beside a running writer)
  inspect   show one agent: state, task, output, error, mailbox, usage, transcript
  approvals list the tool calls waiting for approval (read-only)
  validate  check a team file without running it
  backup    write a compacted copy of a store
  compact   remove old closed agents and read messages from a store
  mcp       serve a store over MCP (stdio, or streamable HTTP on loopback)
  web       serve a live view of a store in the browser (read-only; extra: web)

Exit codes: 0 completed, 1 an agent failed, 2 usage or input error, 130 interrupted.

One module per theme: :mod:`~retinue.cli.parser` (the options),
:mod:`~retinue.cli.run` and :mod:`~retinue.cli.session` (trees run live),
:mod:`~retinue.cli.reads` (read-only views), :mod:`~retinue.cli.render` and
:mod:`~retinue.cli.follow` (drawing a run), :mod:`~retinue.cli.extras`
(commands of optional extras). Every command works through the public
runtime API.
"""

from __future__ import annotations

from retinue.cli.main import main

__all__ = ["main"]
