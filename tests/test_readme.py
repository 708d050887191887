"""The README's examples work as written, and twice in a row (the store persists)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from cliutil import python_script

import retinue
from retinue.team import Team

README = Path(retinue.__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)


# Examples of an optional extra run where the extra is installed (CI installs them):
# what an example imports -> the package its extra brings.
EXTRAS = {
    "prometheus_client": "prometheus_client",
    "retinue.metrics": "prometheus_client",
    "retinue.web": "starlette",
    "opentelemetry.sdk.trace": "opentelemetry.sdk",
    "opentelemetry.sdk.trace.export": "opentelemetry.sdk",
}


def _needs_absent_extra(code: str) -> bool:
    imported = set(re.findall(r"^(?:from|import) ([\w.]+)", code, re.M))
    needed = {package for module, package in EXTRAS.items() if module in imported}
    return any(importlib.util.find_spec(package) is None for package in needed)


def test_every_python_example_runs_twice_in_a_row(tmp_path: Path) -> None:
    blocks = _blocks("python")
    assert blocks
    for number, code in enumerate(blocks):
        if _needs_absent_extra(code):
            continue
        script = tmp_path / f"example_{number}.py"
        script.write_text(code)
        for attempt in (1, 2):
            done = python_script(script)
            assert done.returncode == 0, (number, attempt, done.stderr[-2000:])


def test_the_team_file_example_is_a_valid_team(tmp_path: Path) -> None:
    (toml,) = _blocks("toml")
    team = Team.from_toml(toml, source=tmp_path / "team.toml", environ=False)
    assert team.name == "review" and team.lead == "lead"
    assert list(team.agents) == ["lead", "security", "style"]
    assert team.setting("style", "model") == "openai/gpt-4o-mini"
    assert team.setting("security", "model") == "retinue/scripted"
    assert team.limits.depth_cap == 4
    assert {p.name for p in team.profiles()} == {"lead", "security", "style"}
