"""Daemon configuration: a TOML file, overridden by ``OVERLAY_*`` environment variables,
overridden by command-line flags. Every value is checked; a bad one is a
:class:`ConfigError` naming where it came from and what was expected.

Example file::

    bind = "0.0.0.0:7400"
    advertise = "10.1.0.5:7400"
    seeds = ["10.1.0.2:7400", "10.1.0.3:7400"]
    state_dir = "/var/lib/overlay"
    mode = "structured"            # or "unstructured"
    cluster_key_file = "/etc/overlay/cluster.key"

    [api]
    socket = "/run/overlay/api.sock"
    tcp = "127.0.0.1:7401"        # optional

    [limits]
    max_frame = 1048576
    api_queue_bytes = 67108864

    [storage]
    enabled = true                 # structured mode: topic logs in <state_dir>/topics.sqlite3
    sync = "always"                # or "interval:<ms>", "never" (docs/DESIGN.md: what each risks)
    max_bytes = 1073741824         # optional: a quota on the log file (default: none)

    [[retention]]                  # structured mode; the first rule whose glob matches wins
    topics = "orders.*"            # fnmatch, case-sensitive; "*" spans dots too
    seconds = 86400                # any of count, bytes, seconds; the rest: [protocol] retain_*
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overlay.core.errors import OverlayError
from overlay.core.limits import DEFAULT_MAX_FRAME, MIN_MAX_FRAME, SizeLimits
from overlay.core.storage import SyncPolicy
from scribe.config import RetentionRule

MODES = ("structured", "unstructured")


class ConfigError(OverlayError):
    """A configuration value is missing, malformed or out of range."""


def check_address(value: str, where: str, allow_port_zero: bool = True) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"{where}: {value!r} is not HOST:PORT")
    low = 0 if allow_port_zero else 1
    if not low <= int(port) <= 65535:
        raise ConfigError(f"{where}: port {port} is out of range")
    return value


@dataclass(frozen=True)
class Limits:
    max_frame: int = DEFAULT_MAX_FRAME
    #: Bytes of pushes and replies waiting to be written to one API connection before
    #: the daemon cuts it off (``overloaded``). A replay's events arrive at once: room
    #: for 64 events of the largest size.
    api_queue_bytes: int = 64 << 20
    api_max_connections: int = 1024
    subscriptions_per_connection: int = 10_000
    peer_queue_frames: int = 16_384

    @property
    def sizes(self) -> SizeLimits:
        """The size model that follows from ``max_frame`` (overlay.core.limits)."""
        return SizeLimits(self.max_frame)


#: The smallest quota on the log file: room for its schema and a few events.
MIN_STORAGE_BYTES = 64 << 10


@dataclass(frozen=True)
class Storage:
    """The topic logs (structured mode): on by default, synced at every commit."""

    enabled: bool = True
    sync: SyncPolicy = field(default_factory=SyncPolicy)
    #: A quota on the log file (None: none). A write that would take it past fails as
    #: on a full disk: reliable publishes are refused with ``storage_error``.
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes is not None and (
                type(self.max_bytes) is not int or self.max_bytes < MIN_STORAGE_BYTES):
            raise ValueError(f"max_bytes must be an integer of at least {MIN_STORAGE_BYTES} "
                             f"bytes, not {self.max_bytes!r}")


@dataclass(frozen=True)
class DaemonConfig:
    bind: str = "127.0.0.1:7400"
    advertise: str | None = None
    seeds: tuple[str, ...] = ()
    state_dir: Path = field(default_factory=lambda: _default_state_dir())
    api_socket: Path | None = None
    api_tcp: str | None = None
    trace_dir: Path | None = None
    mode: str = "structured"
    cluster_key_file: Path | None = None
    #: One-way delay added to every peer frame we send, in milliseconds (labs only).
    peer_delay_ms: float = 0.0
    log_level: str = "info"
    limits: Limits = field(default_factory=Limits)
    storage: Storage = field(default_factory=Storage)
    #: Protocol settings passed to the cores (e.g. stabilize_interval), by name.
    protocol: dict[str, Any] = field(default_factory=dict)
    #: Per-topic retention (``[[retention]]``), in the file's order.
    retention: tuple[RetentionRule, ...] = ()

    @property
    def api_socket_path(self) -> Path:
        return self.api_socket or self.state_dir / "api.sock"

    @property
    def trace_path(self) -> Path:
        return self.trace_dir or self.state_dir / "traces"


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "overlay"


# -- reading values --------------------------------------------------------------------

_TOP_KEYS = {"bind", "advertise", "seeds", "state_dir", "mode", "cluster_key_file",
             "trace_dir", "peer_delay_ms", "log_level"}
_SECTIONS = {"api", "limits", "protocol", "storage"}
#: ``[[retention]]`` keys and the type each takes (``topics`` is required).
_RETENTION_KEYS: dict[str, type] = {"topics": str, "count": int, "bytes": int,
                                    "seconds": float}

#: Environment variables and the setting each overrides.
ENVIRONMENT = {
    "OVERLAY_BIND": "bind",
    "OVERLAY_ADVERTISE": "advertise",
    "OVERLAY_SEEDS": "seeds",
    "OVERLAY_STATE_DIR": "state_dir",
    "OVERLAY_API_SOCKET": "api_socket",
    "OVERLAY_API_TCP": "api_tcp",
    "OVERLAY_TRACE_DIR": "trace_dir",
    "OVERLAY_MODE": "mode",
    "OVERLAY_CLUSTER_KEY_FILE": "cluster_key_file",
    "OVERLAY_PEER_DELAY_MS": "peer_delay_ms",
    "OVERLAY_LOG_LEVEL": "log_level",
}


def _typed(value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _apply(settings: dict[str, Any], key: str, value: Any, where: str) -> None:
    """Check one setting (from any source) and store it under its field name."""
    if key in ("bind", "advertise", "api_tcp"):
        settings[key] = check_address(_typed(value, str, where), where,
                                      allow_port_zero=key != "advertise")
    elif key == "seeds":
        if isinstance(value, str):  # environment and flags: comma-separated
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list of HOST:PORT")
        settings[key] = tuple(check_address(_typed(v, str, where), where, False) for v in value)
    elif key in ("state_dir", "api_socket", "trace_dir", "cluster_key_file"):
        text = _typed(value, str, where) if not isinstance(value, Path) else str(value)
        if not text:
            raise ConfigError(f"{where}: empty path")
        settings[key] = Path(text).expanduser()
    elif key == "mode":
        if value not in MODES:
            raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)}, got {value!r}")
        settings[key] = value
    elif key == "peer_delay_ms":
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{where}: {value!r} is not a number") from None
        delay = _typed(value, float, where)
        if not 0 <= delay <= 60_000:
            raise ConfigError(f"{where}: must be within 0..60000 ms")
        settings[key] = delay
    elif key == "log_level":
        if value not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"{where}: log_level must be debug, info, warning or error")
        settings[key] = value
    else:
        raise ConfigError(f"{where}: unknown setting")


def _limits(table: Mapping[str, Any], where: str) -> Limits:
    names = {f.name for f in dataclasses.fields(Limits)}
    values = {}
    for key, value in table.items():
        if key not in names:
            raise ConfigError(f"{where}.{key}: unknown limit (known: {', '.join(sorted(names))})")
        value = _typed(value, int, f"{where}.{key}")
        if value <= 0:
            raise ConfigError(f"{where}.{key}: must be > 0")
        values[key] = value
    max_frame = values.get("max_frame", DEFAULT_MAX_FRAME)
    if values.get("api_queue_bytes", Limits.api_queue_bytes) < 2 * max_frame:
        raise ConfigError(f"{where}.api_queue_bytes: must be at least twice max_frame "
                          f"({2 * max_frame}): a push of the largest event must fit")
    if max_frame < MIN_MAX_FRAME:
        raise ConfigError(f"{where}.max_frame: must be at least {MIN_MAX_FRAME} bytes (the "
                          "size model keeps 32 KiB of a frame for envelopes and attributes)")
    return Limits(**values)


def _storage(table: Mapping[str, Any], where: str) -> Storage:
    storage = Storage()
    for key, value in table.items():
        if key == "enabled":
            storage = dataclasses.replace(storage, enabled=_typed(value, bool, f"{where}.{key}"))
        elif key == "sync":
            try:
                policy = SyncPolicy.parse(value)
            except ValueError as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
            storage = dataclasses.replace(storage, sync=policy)
        elif key == "max_bytes":
            try:
                storage = dataclasses.replace(storage, max_bytes=value)
            except ValueError as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
        else:
            raise ConfigError(f"{where}.{key}: unknown setting (known: enabled, sync, "
                              "max_bytes)")
    return storage


def _retention(rules: Any, where: str) -> tuple[RetentionRule, ...]:
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise ConfigError(f"{where}: expected [[retention]] tables")
    checked = []
    for number, table in enumerate(rules, 1):
        here = f"{where} #{number}"
        values = {}
        for key, value in table.items():
            kind = _RETENTION_KEYS.get(key)
            if kind is None:
                raise ConfigError(f"{here}.{key}: unknown setting (known: "
                                  f"{', '.join(_RETENTION_KEYS)})")
            values[key] = _typed(value, kind, f"{here}.{key}")
        if "topics" not in values:
            raise ConfigError(f"{here}: topics (a name pattern) is required")
        try:
            checked.append(RetentionRule(**values))
        except ValueError as exc:
            raise ConfigError(f"{here}: {exc}") from None
    return tuple(checked)


def load_file(path: Path) -> dict[str, Any]:
    """Read a TOML config file into checked settings."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    settings: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}: {key}"
        if key in _TOP_KEYS:
            _apply(settings, key, value, where)
        elif key == "retention":
            settings["retention"] = _retention(value, where)
        elif key in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a [{key}] table")
            _section(settings, key, value, where)
        else:
            raise ConfigError(f"{where}: unknown setting")
    return settings


def _section(settings: dict[str, Any], name: str, table: dict[str, Any], where: str) -> None:
    if name == "limits":
        settings["limits"] = _limits(table, where)
    elif name == "protocol":
        settings["protocol"] = dict(table)
    elif name == "storage":
        settings["storage"] = _storage(table, where)
    else:
        for key, value in table.items():
            if key == "socket":
                _apply(settings, "api_socket", value, f"{where}.{key}")
            elif key == "tcp":
                _apply(settings, "api_tcp", value, f"{where}.{key}")
            else:
                raise ConfigError(f"{where}.{key}: unknown setting (known: socket, tcp)")


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for var, key in ENVIRONMENT.items():
        if var in environ and environ[var] != "":
            _apply(settings, key, environ[var], var)
    return settings


def build_config(path: Path | None, environ: Mapping[str, str],
                 flags: Mapping[str, Any]) -> DaemonConfig:
    """File, then environment, then flags (``None`` flags are not given)."""
    settings: dict[str, Any] = load_file(path) if path is not None else {}
    settings.update(from_environment(environ))
    for key, value in flags.items():
        if value is not None:
            _apply(settings, key, value, f"--{key.replace('_', '-')}")
    return DaemonConfig(**settings)
