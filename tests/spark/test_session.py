"""The class-data archive options of the session (paths and options only, no JVM)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_analysis import session

pytestmark = pytest.mark.spark


def test_archive_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(session.CDS_ENV, "off")
    assert session.class_archive() is None
    assert session._class_archive_options() == ""


def test_archive_is_written_at_exit_then_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pyspark

    monkeypatch.setenv(session.CDS_ENV, str(tmp_path / "cds"))
    registered: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    monkeypatch.setattr(session.atexit, "register", lambda f, *a: registered.append((f, a)))
    path = session.class_archive()
    assert path is not None and path.parent == tmp_path / "cds"
    assert path.name.startswith(f"spark-{pyspark.__version__}-") and path.suffix == ".jsa"

    writing = session._class_archive_options()
    assert "-XX:ArchiveClassesAtExit=" in writing and session.CDS_QUIET in writing
    (finish, (partial, final)) = registered[0]
    assert final == path and partial.parent == path.parent and not partial.exists()

    from pyspark import SparkContext

    # As if this process had no JVM: the suite's own must not be told to exit.
    monkeypatch.setattr(SparkContext, "_gateway", None)
    partial.write_bytes(b"archive")  # what the JVM leaves at its exit
    finish(partial, final)
    assert path.read_bytes() == b"archive" and not partial.exists()
    assert session._class_archive_options() == f"-XX:SharedArchiveFile={path} {session.CDS_QUIET}"


def test_archive_name_follows_the_jars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A reinstalled jar (same pyspark, same path) gets an archive of its own: the JVM
    would refuse the old one whole."""
    import pyspark

    package = tmp_path / "pyspark"
    (package / "jars").mkdir(parents=True)
    jar = package / "jars" / "a.jar"
    jar.write_bytes(b"one")
    monkeypatch.setattr(pyspark, "__file__", str(package / "__init__.py"))
    monkeypatch.setenv(session.CDS_ENV, str(tmp_path / "cds"))
    first = session.class_archive()
    assert first is not None and session.class_archive() == first
    jar.write_bytes(b"two")
    os.utime(jar, ns=(1, 1))
    assert session.class_archive() not in (None, first)


def test_archives_unused_for_a_week_are_removed(tmp_path: Path) -> None:
    now = 1_000_000_000.0
    ages = {"spark-1-old.jsa": 8, "spark-1-old.jsa.7.tmp": 30, "spark-2-new.jsa": 6, "x.txt": 99}
    for name, days in ages.items():
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (now - days * 86400, now - days * 86400))
    session._prune_archives(tmp_path, now=now)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark-2-new.jsa", "x.txt"]


def test_only_the_most_recently_used_archives_are_kept(tmp_path: Path) -> None:
    # A new archive is about to be written: of the others, the ARCHIVES_KEPT - 1 used
    # last stay (each some 190 MB; a venv set up again writes new jars, so a new one).
    now = 1_000_000_000.0
    for hours in range(5):
        name = tmp_path / f"spark-4-{hours}.jsa"
        name.write_bytes(b"")
        os.utime(name, (now - hours * 3600, now - hours * 3600))
    session._prune_archives(tmp_path, now=now)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"spark-4-{hours}.jsa" for hours in range(session.ARCHIVES_KEPT - 1)]


def test_the_jit_directives_parse_and_only_stderr_hears_of_them() -> None:
    # The JVM refuses to start on a directives file it cannot parse; one that parses is
    # counted on the VM's output, which must reach stderr (filtered), never stdout.
    import shutil
    import subprocess

    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    options = session.JIT_DIRECTIVES.format(path=session.jit_directives_path()).split()
    ran = subprocess.run(
        [java, *options, "-version"], capture_output=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr.decode()
    assert b"compiler directives added" not in ran.stdout
    noise = [line for line in ran.stderr.splitlines() if b"compiler directives" in line]
    assert noise and all(line.startswith(session.JVM_NOISE) for line in noise)
