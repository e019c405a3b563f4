"""The class-data archive options of the session (paths and options only, no JVM)."""

from __future__ import annotations

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
