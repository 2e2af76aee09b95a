"""Logging of the command line: mdband's loggers to stderr through rich's ``RichHandler``.

Verbosity: -1 (``-q``) errors only, 0 warnings (default), 1 (``-v``) INFO, 2+ (``-vv``) DEBUG.
"""

from __future__ import annotations

import logging

LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}


def configure_logging(verbosity: int) -> None:
    """Send the ``mdband`` loggers' records at ``verbosity`` to stderr (idempotent)."""
    from rich.console import Console
    from rich.logging import RichHandler

    logger = logging.getLogger("mdband")
    for handler in list(logger.handlers):
        if getattr(handler, "mdband_cli", False):
            logger.removeHandler(handler)
    handler = RichHandler(console=Console(stderr=True), show_path=False, markup=False)
    handler.mdband_cli = True  # type: ignore[attr-defined]  # our marker on a rich handler
    logger.addHandler(handler)
    logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
