"""Where traces are read from and results written to: local paths or any Hadoop URI.

Spark's readers and writers take any URI Hadoop has a file system for (``hdfs://``,
``s3a://``, ``gs://``, ``abfs://``, ``ftp://``, ...). What the driver writes itself
(summary.json, report.html) goes through the same Hadoop FileSystem API, by the JVM
gateway, when the output is not a local directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

# Characters that make a Hadoop path a glob (FileSystem.globStatus).
_GLOB = re.compile(r"[*?\[{\\]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_USER_INFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def has_scheme(path: str) -> bool:
    """``scheme:...`` (a URI), as opposed to a plain local path."""
    return _SCHEME.match(path) is not None


def local_path(location: str | Path) -> Path | None:
    """The local path of ``location`` (plain path or ``file:`` URI), else None."""
    text = str(location)
    if not has_scheme(text):
        return Path(text)
    parts = urlsplit(text)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(parts.path)
    return None


def without_credentials(text: str) -> str:
    """``text`` (a URI, or a message naming URIs) without the ``user:password@`` that
    URIs such as ``ftp://user:pass@host/...`` carry."""
    return _USER_INFO.sub(r"\1", text)


def glob_free_prefix(path: str) -> str:
    """The folders of ``path`` before its first component with a glob character."""
    head, sep, rest = path.partition("://")
    parts = (rest if sep else head).split("/")
    start = 1 if sep else 0  # the authority (host) of a URI is never a glob
    for i in range(start, len(parts)):
        if _GLOB.search(parts[i]):
            kept = "/".join(parts[:i]) or "/"
            return f"{head}{sep}{kept}" if sep else kept
    return path


def qualified(spark: SparkSession, path: str) -> str:
    """``path`` as Hadoop qualifies it (``/x`` -> ``file:/x``): how Spark names files."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return str(fs.makeQualified(hpath).toString())


def relative_name(file: str, root: str) -> str:
    """A trace file's name for samples: its path under ``root`` (the traces argument,
    qualified), else its URI without credentials. The same file gives the same name
    whichever file system serves it."""
    prefix = root.rstrip("/") + "/"
    if file.startswith(prefix):
        return file[len(prefix) :]
    if file == root.rstrip("/"):
        return file.rsplit("/", 1)[-1]
    return without_credentials(file)


class OutDir:
    """The output directory: a local folder, or a URI written through Hadoop.

    The analysis reads back the records it writes there, as Parquet, which needs a
    file system that can seek (local, ``hdfs://``, ``s3a://``, ``gs://``, ``abfs://``,
    not ``ftp://``).
    """

    def __init__(self, spark: SparkSession, location: str | Path) -> None:
        self.spark = spark
        # A plain path is written by Python; any URI (``file:`` too) through Hadoop.
        self.location = str(location)
        self.local = None if has_scheme(self.location) else Path(self.location)

    def path(self, *parts: str) -> str:
        """Where ``parts`` go under the directory (a path or URI for Spark's writers)."""
        if self.local is not None:
            return str(self.local.joinpath(*parts))
        return "/".join([self.location.rstrip("/"), *parts])

    def prepare(self) -> None:
        """Create the directory (Spark's writers and Hadoop create remote ones)."""
        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)

    def write_text(self, name: str, text: str) -> str:
        """Write ``text`` (UTF-8) into the file ``name``; returns its path."""
        target = self.path(name)
        if self.local is not None:
            temp = self.local / f".{name}.{os.getpid()}.tmp"
            temp.write_text(text, encoding="utf-8")
            temp.replace(target)  # readers never see a half-written file
            return target
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        hpath = jvm.org.apache.hadoop.fs.Path(target)
        fs = hpath.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        stream = fs.create(hpath, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        return target
