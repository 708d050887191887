"""``retinue validate`` runs every check ``retinue run`` runs at open; it imports nothing unasked.

A team ``validate`` calls ok is a team ``run`` opens: both run the one check
``Team.check`` (the function ``Runtime.open`` runs on its profiles), so a team
``run`` refuses is refused by ``validate`` with the same words. Found:
``tools = ["read_fil"]`` and an agent without a runner passed ``validate``
and failed ``run``; ``validate`` imported runner files (their code ran).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cliutil import retinue_cli

from retinue import ConfigurationError, TeamFileError
from retinue.cli import main
from retinue.protocol.tools import MODIFY_TOOLS
from retinue.team import Team

MARKER_RUNNER = """\
from pathlib import Path

Path(__file__).with_name("IMPORTED").write_text("yes")


def fn(turn):
    return "x"
"""

REFUSED = {
    "misspelt built-in tool": (
        '[agents.lead]\nmodel = "retinue/scripted"\ntools = ["read_fil"]\n',
        "names tools that are neither built in nor registered on its runner: read_fil",
    ),
    "child with more tools than its parent": (
        '[agents.lead]\nmodel = "retinue/scripted"\ntools = "read"\nsubagents = ["w"]\n'
        '[agents.w]\nmodel = "retinue/scripted"\ntools = "modify"\n',
        "profile 'w' has tools that profile 'lead', which spawns it, lacks: bash",
    ),
    "agent without a runner or a model": (
        '[agents.lead]\ninstructions = "lead"\n',
        "profile 'lead' has no runner and no model",
    ),
    "approval of a tool not granted": (
        '[agents.lead]\nmodel = "retinue/scripted"\ntools = "read"\napprove = ["bash"]\n',
        "'bash'",
    ),
    "runner file that does not exist": (
        '[agents.lead]\nrunner = "missing.py:fn"\n',
        "key 'runner': cannot import 'missing.py:fn': no file",
    ),
    "runner module that does not exist": (
        '[agents.lead]\nrunner = "no_such_module_k1.sub:fn"\n',
        "no module named 'no_such_module_k1'",
    ),
    "runner key without a function": (
        '[agents.lead]\nrunner = "r.py"\n',
        "'r.py' is not 'module:function'",
    ),
    "runner key whose function is not a name": (
        '[agents.lead]\nrunner = "r.py:not a name"\n',
        "'not a name' is not a Python name",
    ),
}


def _main(argv: list[str | Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_validate_and_run_refuse_alike(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml, expected = REFUSED[case]
    team = tmp_path / "team.toml"
    team.write_text(toml)
    (tmp_path / "r.py").write_text(MARKER_RUNNER)
    validated = _main(["validate", team], capsys)
    ran = _main(["run", team, "go", "--store", tmp_path / "store"], capsys)
    assert validated[0] == ran[0] == 2, (validated, ran)
    assert validated[2] == ran[2], (validated[2], ran[2])  # the same one line
    line = validated[2].strip()
    assert "\n" not in line and line.startswith("retinue: ") and expected in line, line
    assert not (tmp_path / "store" / "data.mdb").exists()  # nothing ran
    assert not (tmp_path / "IMPORTED").exists()


def test_validate_imports_no_runner_unless_asked(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[agents.lead]\nrunner = "r.py:fn"\n')
    (tmp_path / "r.py").write_text(MARKER_RUNNER)
    done = retinue_cli("validate", team)
    assert done.returncode == 0, done.stderr
    assert f"{team}: ok" in done.stdout
    assert not (tmp_path / "IMPORTED").exists()  # checked, not imported
    done = retinue_cli("validate", team, "--import-runners")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "IMPORTED").read_text() == "yes"


def test_import_runners_runs_the_checks_of_an_imported_runner(tmp_path: Path) -> None:
    # A runner key naming a LiteLLMRunner object: its own checks need the object.
    (tmp_path / "r.py").write_text(
        "from retinue.llm import LiteLLMRunner\n"
        'runner = LiteLLMRunner("retinue/scripted", tools="modify")\n'
    )
    team = tmp_path / "team.toml"
    team.write_text('[agents.lead]\nrunner = "r.py:runner"\ntools = "read"\n')
    assert retinue_cli("validate", team).returncode == 0  # not imported: not known
    done = retinue_cli("validate", team, "--import-runners")
    assert done.returncode == 2
    assert "the runner asks for tools its profile does not grant: bash" in done.stderr


def test_team_check_is_the_open_check(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text(MARKER_RUNNER)
    team = Team.from_toml(
        '[agents.lead]\nmodel = "retinue/scripted"\ntools = "modify"\nsubagents = ["w"]\n'
        '[agents.w]\nrunner = "r.py:fn"\n',
        source=tmp_path / "team.toml",
    )
    checked = team.check()
    assert checked["w"].tools == MODIFY_TOOLS  # what it inherits from its spawner, resolved
    assert not (tmp_path / "IMPORTED").exists()
    with pytest.raises(ConfigurationError, match="registered on its runner: read_fil"):
        Team.from_toml('[agents.lead]\nmodel = "retinue/scripted"\ntools = ["read_fil"]\n').check()
    with pytest.raises(TeamFileError, match="no module named 'no_such_module_k1'"):
        Team.from_toml('[agents.lead]\nrunner = "no_such_module_k1:fn"\n').check()
