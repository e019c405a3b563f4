"""The local socket API (API.md): request validation, server, connection handling."""

from overlay.runtime.api.requests import ApiError
from overlay.runtime.api.server import ApiConfig, ApiServer
from overlay.runtime.api.service import (
    Expired,
    Notifications,
    PublishResult,
    PubSubService,
    Sink,
)

__all__ = [
    "ApiConfig",
    "ApiError",
    "ApiServer",
    "Expired",
    "Notifications",
    "PubSubService",
    "PublishResult",
    "Sink",
]
