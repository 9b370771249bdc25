"""Box Lite's home resolution and box.env parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference.box_lite.errors import BadInput, BoxError
from reference.box_lite.paths import BoxHome, check_name, inside
from reference.box_lite.settings import KEYS, Settings, default_file_text, parse_size


def test_home_flag_wins_over_env_and_xdg(tmp_path: Path) -> None:
    env = {"HERMES_BOX_HOME": str(tmp_path / "env"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    home = BoxHome.resolve(tmp_path / "flag", env)
    assert home.root == tmp_path / "flag"
    assert home.config_dir == tmp_path / "flag" / "config"
    assert home.data_dir == tmp_path / "flag" / "data"
    assert home.backups_dir == tmp_path / "flag" / "backups"
    assert home.runtime_dir == tmp_path / "flag" / "run"


def test_env_home_wins_over_xdg(tmp_path: Path) -> None:
    home = BoxHome.resolve(None, {"HERMES_BOX_HOME": str(tmp_path / "env")})
    assert home.root == tmp_path / "env"
    assert home.registry_file == tmp_path / "env" / "config" / "registry.json"


def test_xdg_directories_follow_the_xdg_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    runtime = tmp_path / "rt"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("HERMES_BOX_HOME", raising=False)
    home = BoxHome.resolve()
    assert home.root is None
    assert home.config_dir == tmp_path / "cfg" / "hermes-box"
    assert home.data_dir == tmp_path / "share" / "hermes-box"
    assert home.backups_dir == tmp_path / "share" / "hermes-box" / "backups"
    assert home.runtime_dir == runtime / "hermes-box"
    assert home.settings_file == tmp_path / "cfg" / "hermes-box" / "box.env"
    # Without a runtime directory, runtime files go under the data directory.
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert BoxHome.resolve().runtime_dir == tmp_path / "share" / "hermes-box" / "run"
    assert not (tmp_path / "cfg").exists() and not (tmp_path / "share").exists()  # resolving creates nothing


def test_ensure_makes_private_directories(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path / "h").ensure()
    for path in (home.config_dir, home.boxes_dir, home.backups_dir, home.runtime_dir):
        assert path.is_dir()
        assert path.stat().st_mode & 0o777 == 0o700


def test_box_paths_follow_the_layout(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    box, run = home.box("alpha"), home.run("alpha")
    assert box.data == tmp_path / "data" / "boxes" / "alpha" / "data"
    assert box.home == box.data / "home"
    assert box.record == tmp_path / "data" / "boxes" / "alpha" / "box.json"
    assert box.env_file == tmp_path / "data" / "boxes" / "alpha" / "managed" / "hermes-box.env"
    assert run.control_socket == tmp_path / "run" / "alpha" / "control.sock"
    assert run.lock == tmp_path / "run" / "alpha" / "lock"
    assert run.daemon_pid == tmp_path / "run" / "alpha" / "daemon.pid"


def test_paths_relative_to_data_are_named_as_the_box_sees_them() -> None:
    assert inside("home/workspace/.venv/bin/python") == "/home/agent/workspace/.venv/bin/python"
    assert inside("home") == "/home/agent"
    assert inside("homework/x") == "/data/homework/x"
    assert inside("") == "/data"


@pytest.mark.parametrize("name", ["alpha", "a", "work-2", "0x", "a" * 63])
def test_valid_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "Alpha", "-a", "a_b", "a/b", "..", "a" * 64, "al pha", "é"])
def test_invalid_names_are_bad_input_with_a_fix(name: str, tmp_path: Path) -> None:
    with pytest.raises(BadInput) as info:
        check_name(name)
    assert "not a valid box name" in info.value.what
    assert "alpha" in info.value.fix
    with pytest.raises(BadInput):
        BoxHome.at(tmp_path).box(name)


def test_missing_settings_file_gives_defaults(tmp_path: Path) -> None:
    settings = Settings.load(tmp_path / "box.env")
    assert settings.network is True
    assert settings.save_size_limit == 16 * 1024**3
    assert settings.tmux is True
    assert settings.source is None


def test_settings_syntax(tmp_path: Path) -> None:
    path = tmp_path / "box.env"
    path.write_text(
        "# a comment\n"
        "\n"
        "NETWORK=off   # cut it\n"
        "export SAVE_SIZE_LIMIT='512M'\n"
        'SHELL="/bin/sh"\n'
        "  DOCTOR_TIMEOUT = 3\n"
        "BACKUP_MAX_AGE_DAYS=1.5\n"
    )
    settings = Settings.load(path)
    assert settings.network is False
    assert settings.save_size_limit == 512 * 1024**2
    assert settings.shell == "/bin/sh"
    assert settings.doctor_timeout == 3.0
    assert settings.backup_max_age_days == 1.5
    assert settings.values["NETWORK"] == "off"
    env = settings.as_env()
    assert env["NETWORK"] == "off" and env["SAVE_SIZE_LIMIT"] == str(512 * 1024**2)
    assert set(env) == set(KEYS)
    # What render() writes parses back to the same settings.
    again = Settings.parse(settings.render())
    assert again.as_env() == env


def test_double_quotes_take_escapes_and_single_quotes_are_literal() -> None:
    assert Settings.parse('SHELL="/bin/ba\\"sh"').shell == '/bin/ba"sh'
    assert Settings.parse("SHELL='/bin/a#b'").shell == "/bin/a#b"


def test_the_default_file_parses_to_the_defaults() -> None:
    assert Settings.parse(default_file_text()).as_env() == Settings().as_env()
    for key in KEYS:
        assert Settings.parse(f"{key}={KEYS[key].default}").as_env() == Settings().as_env()


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("# c\nNETWROK=off\n", 2, ["unknown setting NETWROK", "did you mean NETWORK"]),
        ("NETWORK=maybe\n", 1, ["NETWORK='maybe' is not on or off", "write on or off"]),
        ("\n\nSAVE_SIZE_LIMIT=lots\n", 3, ["is not a size", "8G"]),
        ("SAVE_SIZE_LIMIT=0\n", 1, ["more than zero"]),
        ("DOCTOR_TIMEOUT=600\n", 1, ["outside 1..60 seconds"]),
        ("just words\n", 1, ["is not KEY=VALUE"]),
        ("network=on\n", 1, ["is not KEY=VALUE"]),
        ("NETWORK=on\nNETWORK=off\n", 2, ["set twice", "line 1"]),
        ("SHELL='/bin/sh\n", 1, ["no closing single quote"]),
        ('SHELL="/bin/sh" extra\n', 1, ["text after its closing quote"]),
        ("SHELL=bash\n", 1, ["not an absolute path", "/bin/bash"]),
        ("PIDS_MAX=8\n", 1, ["is below 16", "16 or more, or off"]),
        ("PIDS_MAX=many\n", 1, ["is not a whole number"]),
        ("MEMORY_MAX=1M\n", 1, ["is below 16M", "512M"]),
        ("CPU_MAX=-1\n", 1, ["more than zero", "1.5, or off"]),
    ],
)
def test_bad_settings_name_the_line_and_the_fix(tmp_path: Path, text: str, line: int, words: list[str]) -> None:
    path = tmp_path / "box.env"
    path.write_text(text)
    with pytest.raises(BadInput) as info:
        Settings.load(path)
    message = f"{info.value.what} {info.value.why} {info.value.fix}"
    assert f"{path} line {line}" in message
    for word in words:
        assert word in message
    assert isinstance(info.value, BoxError)


@pytest.mark.parametrize(("text", "size"), [("1", 1), ("2k", 2048), ("3MiB", 3 * 1024**2), ("1.5G", 3 * 1024**3 // 2)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_limits_are_off_unless_set() -> None:
    assert (Settings().pids_max, Settings().memory_max, Settings().cpu_max) == (None, None, None)
    got = Settings.parse("PIDS_MAX=256\nMEMORY_MAX=512M\nCPU_MAX=1.5\n")
    assert (got.pids_max, got.memory_max, got.cpu_max) == (256, 512 * 1024**2, 1.5)
    assert Settings.parse("PIDS_MAX=off\n").pids_max is None
    assert "PIDS_MAX=256" in got.render() and "CPU_MAX=off" in Settings().render()
